// Package awstest wires the AWS provider to the local AWS endpoints (test/awsfake) for tests:
// the real SDK clients with static credentials against the fake's URL, a fake clock, and the
// runbook's manifests with their placeholders filled.
package awstest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/go-logr/logr/testr"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	awsv1 "capstan.dev/capstan/api/aws/v1"
	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider/aws"
	"capstan.dev/capstan/internal/cloudprovider/unavailable"
	"capstan.dev/capstan/internal/testenv"
	"capstan.dev/capstan/test/awsfake"
)

// Cluster is the cluster name the fixtures use.
const Cluster = "capstan-test"

// AccessKey is the static access key the clients sign with.
const AccessKey = "AKIDCAPSTANTEST"

// Fixture is a fake AWS and a provider over it.
type Fixture struct {
	AWS         *awsfake.Server
	Clients     *aws.Clients
	Provider    *aws.Provider
	Clock       *clocktesting.FakeClock
	Unavailable *unavailable.Offerings
	Kube        client.Client
	// KubeVersion is the cluster's Kubernetes version the provider resolves aliases for
	// (default 1.37; read at each resolution).
	KubeVersion string
}

// New starts a fake AWS for the test and builds a provider reading through kube.
func New(t testing.TB, kube client.Client) *Fixture {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	srv, err := awsfake.New(awsfake.Options{ClusterName: Cluster, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	f := &Fixture{AWS: srv, Clock: clk, Kube: kube, KubeVersion: "1.37"}
	f.Clients = f.NewClients(t, aws.ClientOptions{})
	f.Unavailable = unavailable.New(clk, unavailable.DefaultTTL)
	f.Provider = f.NewProvider(t, f.Clients)
	return f
}

// NewClients builds SDK clients against the fake (o's region and endpoint default to the
// fake's).
func (f *Fixture) NewClients(t testing.TB, o aws.ClientOptions) *aws.Clients {
	t.Helper()
	if o.Region == "" {
		o.Region = f.AWS.Region()
	}
	if o.EndpointURL == "" {
		o.EndpointURL = f.AWS.URL()
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = 3
	}
	o.ConfigOptions = append(o.ConfigOptions, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(AccessKey, "secret", "")))
	c, err := aws.NewClients(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// NewProvider builds a provider (a restarted Capstan has new, empty caches); change adjusts its
// options (isolated VPC, reserved ENIs …).
func (f *Fixture) NewProvider(t testing.TB, c *aws.Clients, change ...func(*aws.Options)) *aws.Provider {
	o := aws.Options{ClusterName: Cluster,
		ClusterEndpoint: "https://kube.example:6443", ClusterCABundle: "Q0E=", Log: testr.NewWithInterface(t, testr.Options{}),
		KubernetesVersion: func(context.Context) (string, error) { return f.KubeVersion, nil }}
	for _, ch := range change {
		ch(&o)
	}
	return aws.NewProvider(f.Kube, c, f.Clock, f.Unavailable, o)
}

// Orders reads the runbook's examples/aws/orders.yaml with its placeholders filled: the
// fixture's cluster, the newest amd64 AL2023 image for 1.37 and the nodes' security group.
func (f *Fixture) Orders(t testing.TB) (*awsv1.EC2NodeClass, *karpv1.NodePool) {
	t.Helper()
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "examples", "aws", "orders.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ami := f.AWS.Parameter("/aws/service/eks/optimized-ami/1.37/amazon-linux-2023/x86_64/standard/recommended/image_id")
	s := strings.NewReplacer("${CLUSTER_NAME}", Cluster, "${AMI_ID}", ami, "${SECURITY_GROUP_ID}", "sg-0nodes00000000001").Replace(string(b))
	docs := strings.Split(s, "\n---\n")
	nc, np := &awsv1.EC2NodeClass{}, &karpv1.NodePool{}
	if err := yaml.UnmarshalStrict([]byte(docs[0]), nc); err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict([]byte(docs[1]), np); err != nil {
		t.Fatal(err)
	}
	return nc, np
}

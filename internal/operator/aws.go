package operator

import (
	"cmp"
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"time"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"

	"capstan.dev/capstan/internal/cloudprovider/aws"
	"capstan.dev/capstan/internal/cloudprovider/unavailable"
	"capstan.dev/capstan/internal/controllers/ec2nodeclass"
	"capstan.dev/capstan/internal/controllers/interruption"
	"capstan.dev/capstan/internal/controllers/nodeclaim/tagging"
)

// newAWS builds the AWS provider and its controllers: EC2NodeClass resolution, the tags of
// registered instances, the instance status poll and, with --interruption-queue, the
// interruption queue's consumer.
func (b *builder) newAWS(cfg *rest.Config, unavailable *unavailable.Offerings) (*aws.Provider, error) {
	o, mgr, clk, log, m := b.o, b.op.Manager, b.clk, b.log, b.m
	clients, err := aws.NewClients(context.Background(), aws.ClientOptions{Region: o.AWSRegion, EndpointURL: o.AWSEndpointURL})
	if err != nil {
		return nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating discovery client: %w", err)
	}
	endpoint, ca, cidr, err := joinSettings(clients.EKS, o)
	if err != nil {
		return nil, err
	}
	if ca == "" && len(cfg.CAData) > 0 {
		ca = base64.StdEncoding.EncodeToString(cfg.CAData)
	}
	p := aws.NewProvider(mgr.GetClient(), clients, clk, unavailable, aws.Options{
		ClusterName: o.ClusterName, ClusterEndpoint: endpoint, ClusterCABundle: ca, ClusterCIDR: cidr,
		VMMemoryOverheadPercent: o.VMMemoryOverheadPercent, IsolatedVPC: o.IsolatedVPC, ReservedENIs: o.ReservedENIs, Log: log.WithName("aws"),
		DisableReservedCapacity: !o.FeatureGates.ReservedCapacity,
		KubernetesVersion:       func(context.Context) (string, error) { return kubeMinorVersion(dc) },
	})
	if err := (&ec2nodeclass.Controller{Client: mgr.GetClient(), Provider: p, Clock: clk, Recorder: b.rec,
		Resync: o.NodeClassResync()}).Register(mgr); err != nil {
		return nil, err
	}
	if err := (&tagging.Controller{Client: mgr.GetClient(), Tagger: p}).Register(mgr); err != nil {
		return nil, err
	}
	if o.InterruptionQueue != "" {
		if err := mgr.Add(&interruption.Controller{Client: mgr.GetClient(), SQS: clients.SQS, Queue: o.InterruptionQueue, Clock: clk,
			Recorder: b.rec, Metrics: m, Unavailable: unavailable, ReplaceOnRebalance: o.ReplaceOnRebalance, Region: clients.Region}); err != nil {
			return nil, err
		}
	}
	// EC2's status checks are read with or without a queue.
	if err := mgr.Add(&interruption.Health{Client: mgr.GetClient(), EC2: clients.EC2, Clock: clk,
		Recorder: b.rec, Metrics: m}); err != nil {
		return nil, err
	}
	return p, nil
}

// joinSettings is what nodes need to join: the API server's URL (--cluster-endpoint; unset, EKS
// DescribeCluster's, as Karpenter resolves it — the address Capstan itself talks to is often one
// machines cannot reach), its CA bundle (--cluster-ca-bundle) and the service CIDR; with
// --eks-control-plane (Karpenter's eksControlPlane) the CA bundle and service CIDR come from EKS
// too where not set. A call that fails stops the start, naming the setting that would avoid it.
func joinSettings(eksAPI aws.EKSAPI, o Options) (endpoint, ca, cidr string, err error) {
	endpoint, ca = o.ClusterEndpoint, o.ClusterCABundle
	if endpoint != "" && !o.EKSControlPlane {
		return endpoint, ca, "", nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := aws.DescribeCluster(ctx, eksAPI, o.ClusterName)
	switch {
	case err != nil && o.EKSControlPlane:
		return "", "", "", fmt.Errorf("--eks-control-plane (EKS_CONTROL_PLANE): %w", err)
	case err != nil:
		return "", "", "", fmt.Errorf("--cluster-endpoint (CLUSTER_ENDPOINT) is not set, and reading it from EKS failed (set it, or allow eks:DescribeCluster): %w", err)
	}
	endpoint = cmp.Or(endpoint, cl.Endpoint)
	if o.EKSControlPlane {
		ca, cidr = cmp.Or(ca, cl.CABundle), cl.ServiceCIDR
	}
	return endpoint, ca, cidr, nil
}

// kubeMinorVersion is the API server's "major.minor" ("1.37"), as AMI aliases name it.
func kubeMinorVersion(dc discovery.ServerVersionInterface) (string, error) {
	v, err := dc.ServerVersion()
	if err != nil {
		return "", fmt.Errorf("reading the API server's version: %w", err)
	}
	return v.Major + "." + strings.TrimSuffix(v.Minor, "+"), nil
}

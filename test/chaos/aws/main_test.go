// Package aws is the chaos suite's scenarios on the local AWS endpoints (test/awsfake): Capstan
// with --cloud-provider=aws and an interruption queue, on a local cluster whose fake kubelet
// boots the endpoints' instances.
package aws

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"capstan.dev/capstan/test/awsfake"
	"capstan.dev/capstan/test/e2e"
)

const (
	cluster = "capstan-chaos"
	queue   = "capstan-chaos-interruption"
)

var (
	h     *e2e.Harness
	cloud *awsfake.Server
)

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	e2e.Main(m, "capstan-chaos-aws-", &h, func(hs *e2e.Harness) (func(), error) {
		var err error
		if cloud, err = awsfake.New(awsfake.Options{ClusterName: cluster}); err != nil {
			return nil, err
		}
		cloud.CreateQueue(queue+"-dlq", "", 0)
		cloud.CreateQueue(queue, queue+"-dlq", 3)
		if err := cloud.Start(); err != nil {
			return nil, err
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() { _ = (&awsfake.Kubelet{Server: cloud, Client: hs.Client, Kwok: true}).Start(ctx) }()
		teardown := func() { cancel(); cloud.Close() }
		return teardown, hs.Start([]string{"--kubeconfig", hs.Cluster.KubeconfigPath, "--disable-leader-election",
			"--metrics-bind-address=0", "--health-probe-bind-address=127.0.0.1:0",
			"--cloud-provider=aws", "--cluster-name=" + cluster, "--aws-endpoint-url=" + cloud.URL(), "--aws-region=" + cloud.Region(),
			"--interruption-queue=" + queue, "--batch-idle-duration=1s", "--batch-max-duration=5s"},
			"AWS_ACCESS_KEY_ID=chaos", "AWS_SECRET_ACCESS_KEY=chaos", "AWS_EC2_METADATA_DISABLED=true")
	})
}

var (
	setting = e2e.ChaosSetting
	figures = e2e.ChaosFigures
)

func eventually(t testing.TB, what string, timeout time.Duration, cond func(context.Context) (bool, error)) {
	t.Helper()
	e2e.Eventually(t, what, timeout, cond, h.Dump)
}

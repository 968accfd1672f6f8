// Command awsfake runs the local AWS endpoints for `make run CLOUD=aws`: EC2, IAM, SSM, Pricing
// and SQS on one address, an interruption queue with a dead-letter queue, and the instances'
// kubelets registering Nodes in the cluster of --kubeconfig (kwok runs their pods). It prints
// the values the runbook's manifests need.
//
//	awsfake --listen 127.0.0.1:4566 --kubeconfig .capstan/kubeconfig --cluster-name capstan-local
//	awsfake drill spot --nodepool spot-drill            # or --instance i-0123…
//	awsfake drill dead-letter --nodepool spot-drill     # a message Capstan cannot handle, dead-lettered
//
// The drills read $AWS_ENDPOINT_URL, $INTERRUPTION_QUEUE and $KUBECONFIG (the values it prints).
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"capstan.dev/capstan/internal/scheme"
	"capstan.dev/capstan/test/awsfake"
)

func main() {
	if len(os.Args) > 2 && os.Args[1] == "drill" && (os.Args[2] == "spot" || os.Args[2] == "dead-letter") {
		os.Exit(drill(os.Args[2], os.Args[3:]))
	}
	if err := serve(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "awsfake:", err)
		os.Exit(1)
	}
}

func serve(args []string) error {
	fs := flag.NewFlagSet("awsfake", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:4566", "address to serve on")
	kubeconfig := fs.String("kubeconfig", "", "cluster the instances' Nodes register in (none: no Nodes)")
	cluster := fs.String("cluster-name", "capstan-local", "cluster name the subnets and security group are tagged with")
	queue := fs.String("queue", "", "interruption queue to create, with <queue>-dlq after 3 receives (default: the cluster name)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *queue == "" {
		*queue = *cluster
	}
	srv, err := awsfake.New(awsfake.Options{ClusterName: *cluster})
	if err != nil {
		return err
	}
	srv.CreateQueue(*queue+"-dlq", "", 0)
	srv.CreateQueue(*queue, *queue+"-dlq", 3)
	if err := srv.Listen(*listen); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *kubeconfig != "" {
		c, err := kubeClient(*kubeconfig)
		if err != nil {
			return err
		}
		go func() { _ = (&awsfake.Kubelet{Server: srv, Client: c, Kwok: true}).Start(ctx) }()
	}
	ami := srv.Parameter("/aws/service/eks/optimized-ami/1.37/amazon-linux-2023/x86_64/standard/recommended/image_id")
	// Dummy credentials (the endpoints check signatures, not keys) and both region variables: the
	// SDK reads AWS_REGION, the AWS CLI v1 only AWS_DEFAULT_REGION.
	fmt.Printf("AWS_ENDPOINT_URL=%s\nAWS_REGION=%s\nAWS_DEFAULT_REGION=%s\nAWS_ACCESS_KEY_ID=local\nAWS_SECRET_ACCESS_KEY=local\n"+
		"AWS_EC2_METADATA_DISABLED=true\nCLUSTER_NAME=%s\nINTERRUPTION_QUEUE=%s\nAMI_ID=%s\nSECURITY_GROUP_ID=%s\n",
		srv.URL(), srv.Region(), srv.Region(), *cluster, *queue, ami, "sg-0nodes00000000001")
	<-ctx.Done()
	return srv.Close()
}

func drill(kind string, args []string) int {
	fs := flag.NewFlagSet("awsfake drill "+kind, flag.ExitOnError)
	endpoint := fs.String("endpoint", cmp.Or(os.Getenv("AWS_ENDPOINT_URL"), "http://127.0.0.1:4566"), "the local endpoints (default $AWS_ENDPOINT_URL)")
	queue := fs.String("queue", cmp.Or(os.Getenv("INTERRUPTION_QUEUE"), "capstan-local"), "interruption queue (default $INTERRUPTION_QUEUE)")
	dlq := fs.String("dlq", "", "its dead-letter queue (default <queue>-dlq)")
	instance := fs.String("instance", "", "the instance (default: the oldest live one of --nodepool)")
	nodepool := fs.String("nodepool", "", "the NodePool whose oldest live instance the drill takes")
	kubeconfig := fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "the cluster (dead-letter; default $KUBECONFIG)")
	_ = fs.Parse(args)
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "awsfake drill "+kind+":", err); return 1 }
	if (*instance == "") == (*nodepool == "") {
		return fail(fmt.Errorf("give --instance or --nodepool"))
	}
	d := &awsfake.Drill{Endpoint: *endpoint, Queue: *queue, DLQ: cmp.Or(*dlq, *queue+"-dlq"), Out: os.Stdout}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	lifecycle := ""
	if kind == "spot" {
		lifecycle = "spot"
	}
	inst, err := d.Instance(ctx, *instance, *nodepool, lifecycle)
	if err != nil {
		return fail(err)
	}
	if kind == "spot" {
		if err := d.Spot(ctx, inst); err != nil {
			return fail(err)
		}
		return 0
	}
	if d.Kube, err = kubeClient(*kubeconfig); err != nil {
		return fail(err)
	}
	if err := d.DeadLetter(ctx, inst); err != nil {
		return fail(err)
	}
	return 0
}

// kubeClient is a client of the cluster of kubeconfig with Capstan's types.
func kubeClient(kubeconfig string) (client.Client, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	sch, err := scheme.New()
	if err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: sch})
}

// Command awsfake runs the local AWS endpoints for `make run CLOUD=aws`: EC2, IAM, SSM, Pricing
// and SQS on one address, an interruption queue with a dead-letter queue, and the instances'
// kubelets registering Nodes in the cluster of --kubeconfig (kwok runs their pods). It prints
// the values the runbook's manifests need.
//
//	awsfake --listen 127.0.0.1:4566 --kubeconfig .capstan/kubeconfig --cluster-name capstan-local
//	awsfake drill spot --endpoint http://127.0.0.1:4566 --instance i-0123… [--queue capstan-local]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"capstan.dev/capstan/internal/scheme"
	"capstan.dev/capstan/test/awsfake"
)

func main() {
	if len(os.Args) > 2 && os.Args[1] == "drill" && os.Args[2] == "spot" {
		os.Exit(drill(os.Args[3:]))
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
		cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
		if err != nil {
			return err
		}
		sch, err := scheme.New()
		if err != nil {
			return err
		}
		c, err := client.New(cfg, client.Options{Scheme: sch})
		if err != nil {
			return err
		}
		go func() { _ = (&awsfake.Kubelet{Server: srv, Client: c, Kwok: true}).Start(ctx) }()
	}
	ami := srv.Parameter("/aws/service/eks/optimized-ami/1.37/amazon-linux-2023/x86_64/standard/recommended/image_id")
	fmt.Printf("AWS_ENDPOINT_URL=%s\nAWS_REGION=%s\nCLUSTER_NAME=%s\nINTERRUPTION_QUEUE=%s\nAMI_ID=%s\nSECURITY_GROUP_ID=%s\n",
		srv.URL(), srv.Region(), *cluster, *queue, ami, "sg-0nodes00000000001")
	<-ctx.Done()
	return srv.Close()
}

func drill(args []string) int {
	fs := flag.NewFlagSet("awsfake drill spot", flag.ExitOnError)
	endpoint := fs.String("endpoint", "http://127.0.0.1:4566", "the awsfake endpoint")
	instance := fs.String("instance", "", "Spot instance to interrupt")
	queue := fs.String("queue", "capstan-local", "interruption queue")
	_ = fs.Parse(args)
	resp, err := http.Get(*endpoint + awsfake.AdminPrefix + "interrupt-spot?" + url.Values{"instance": {*instance}, "queue": {*queue}}.Encode())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer resp.Body.Close()
	_, _ = io.Copy(os.Stdout, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return 1
	}
	return 0
}

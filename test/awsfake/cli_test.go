package awsfake_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"capstan.dev/capstan/test/awsfake"
)

// TestTheAWSCLIReadsTheEndpoints drives the local AWS endpoints with the AWS CLI (another
// client than the SDK Capstan uses, with its own protocol code: botocore), so the endpoints
// answer what a real client expects, not only what aws-sdk-go-v2 accepts: cmd/awsfake as `make
// run CLOUD=aws` runs it (built and started here), and a server holding a capacity reservation
// (the binary has no control to add one). `make test` installs the CLI first when it is missing
// (hack/ensure-awscli.sh).
func TestTheAWSCLIReadsTheEndpoints(t *testing.T) {
	if _, err := exec.LookPath("aws"); err != nil {
		t.Fatal("the aws CLI is not installed: run hack/ensure-awscli.sh (make test does)")
	}
	bin := filepath.Join(t.TempDir(), "awsfake")
	if out, err := exec.Command("go", "build", "-o", bin, "capstan.dev/capstan/test/awsfake/cmd/awsfake").CombinedOutput(); err != nil {
		t.Fatalf("building cmd/awsfake: %v: %s", err, out)
	}
	cmd := exec.Command(bin, "--listen", "127.0.0.1:0", "--cluster-name", "cli", "--queue", "cli-queue")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() })
	printed := map[string]string{}
	sc := bufio.NewScanner(stdout)
	for printed["SECURITY_GROUP_ID"] == "" && sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			printed[k] = v
		}
	}
	endpoint, region := printed["AWS_ENDPOINT_URL"], printed["AWS_REGION"]
	if endpoint == "" {
		t.Fatalf("cmd/awsfake printed %v", printed)
	}
	srv, err := awsfake.New(awsfake.Options{ClusterName: "cli"})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	srv.AddCapacityReservation(awsfake.CapacityReservation{ID: "cr-0cli", InstanceType: "m5.large", Zone: srv.Zones()[0].Name, Total: 4,
		Tags: map[string]string{"team": "ml"}})
	at := func(url string) func(out any, args ...string) {
		return func(out any, args ...string) {
			t.Helper()
			cmd := exec.Command("aws", append([]string{"--endpoint-url", url, "--region", region, "--output", "json"}, args...)...)
			cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID=AKIDCLI", "AWS_SECRET_ACCESS_KEY=secret", "AWS_CONFIG_FILE=/dev/null",
				"AWS_SHARED_CREDENTIALS_FILE=/dev/null", "AWS_PAGER=")
			b, err := cmd.Output()
			if err != nil {
				stderr := ""
				if ee, ok := err.(*exec.ExitError); ok {
					stderr = string(ee.Stderr)
				}
				t.Fatalf("aws %s: %v: %s", strings.Join(args, " "), err, stderr)
			}
			if out != nil {
				if err := json.Unmarshal(b, out); err != nil {
					t.Fatalf("aws %s: %v: %s", strings.Join(args, " "), err, b)
				}
			}
		}
	}
	aws := at(endpoint)

	var its struct {
		InstanceTypes []struct {
			InstanceType string
			VCpuInfo     struct{ DefaultVCpus int }
			MemoryInfo   struct{ SizeInMiB int }
		}
	}
	aws(&its, "ec2", "describe-instance-types", "--instance-types", "m5.large")
	if len(its.InstanceTypes) != 1 || its.InstanceTypes[0].VCpuInfo.DefaultVCpus != 2 || its.InstanceTypes[0].MemoryInfo.SizeInMiB != 8192 {
		t.Errorf("describe-instance-types m5.large: %+v", its)
	}
	var subnets struct {
		Subnets []struct{ SubnetId, AvailabilityZone string }
	}
	aws(&subnets, "ec2", "describe-subnets", "--filters", "Name=tag:karpenter.sh/discovery,Values=cli")
	if len(subnets.Subnets) == 0 {
		t.Errorf("describe-subnets by the discovery tag: %+v", subnets)
	}
	var crs struct {
		CapacityReservations []struct {
			CapacityReservationId                      string
			TotalInstanceCount, AvailableInstanceCount int
			State, ReservationType                     string
		}
	}
	at(srv.URL())(&crs, "ec2", "describe-capacity-reservations", "--filters", "Name=tag:team,Values=ml", "Name=state,Values=active")
	if len(crs.CapacityReservations) != 1 || crs.CapacityReservations[0].CapacityReservationId != "cr-0cli" ||
		crs.CapacityReservations[0].AvailableInstanceCount != 4 || crs.CapacityReservations[0].ReservationType != "default" {
		t.Errorf("describe-capacity-reservations: %+v", crs)
	}
	var param struct{ Parameter struct{ Value string } }
	aws(&param, "ssm", "get-parameter", "--name", "/aws/service/eks/optimized-ami/1.37/amazon-linux-2023/x86_64/standard/recommended/image_id")
	if !strings.HasPrefix(param.Parameter.Value, "ami-") {
		t.Errorf("get-parameter: %+v", param)
	}
	var images struct {
		Images []struct{ ImageId, Architecture string }
	}
	aws(&images, "ec2", "describe-images", "--image-ids", param.Parameter.Value)
	if len(images.Images) != 1 || images.Images[0].Architecture != "x86_64" {
		t.Errorf("describe-images %s: %+v", param.Parameter.Value, images)
	}
	var q struct{ QueueUrl string }
	aws(&q, "sqs", "get-queue-url", "--queue-name", "cli-queue")
	if q.QueueUrl == "" {
		t.Fatalf("get-queue-url: %+v", q)
	}
	aws(nil, "sqs", "send-message", "--queue-url", q.QueueUrl, "--message-body", `{"detail-type":"test"}`)
	var msgs struct {
		Messages []struct{ Body, ReceiptHandle string }
	}
	aws(&msgs, "sqs", "receive-message", "--queue-url", q.QueueUrl)
	if len(msgs.Messages) != 1 || msgs.Messages[0].Body != `{"detail-type":"test"}` {
		t.Fatalf("receive-message: %+v", msgs)
	}
	aws(nil, "sqs", "delete-message", "--queue-url", q.QueueUrl, "--receipt-handle", msgs.Messages[0].ReceiptHandle)
	var after struct{ Attributes map[string]string }
	aws(&after, "sqs", "get-queue-attributes", "--queue-url", q.QueueUrl, "--attribute-names", "All")
	if n := after.Attributes["ApproximateNumberOfMessages"]; n != "0" {
		t.Errorf("messages left after delete-message: %v", after.Attributes)
	}
	// The dead-letter path as docs/aws.md sets it up: a queue with a redrive policy, read back by
	// the one attribute asked for, and every queue listed.
	var dlq struct{ QueueUrl string }
	aws(&dlq, "sqs", "create-queue", "--queue-name", "cli-dlq")
	var dlqAttrs struct{ Attributes map[string]string }
	aws(&dlqAttrs, "sqs", "get-queue-attributes", "--queue-url", dlq.QueueUrl, "--attribute-names", "QueueArn")
	policy, err := json.Marshal(map[string]string{"deadLetterTargetArn": dlqAttrs.Attributes["QueueArn"], "maxReceiveCount": "3"})
	if err != nil {
		t.Fatal(err)
	}
	attrs, err := json.Marshal(map[string]string{"RedrivePolicy": string(policy)})
	if err != nil {
		t.Fatal(err)
	}
	var redriven struct{ QueueUrl string }
	aws(&redriven, "sqs", "create-queue", "--queue-name", "cli-redriven", "--attributes", string(attrs))
	var rp struct{ Attributes map[string]string }
	aws(&rp, "sqs", "get-queue-attributes", "--queue-url", redriven.QueueUrl, "--attribute-names", "RedrivePolicy")
	var got struct {
		DeadLetterTargetArn string `json:"deadLetterTargetArn"`
		MaxReceiveCount     int    `json:"maxReceiveCount"`
	}
	if err := json.Unmarshal([]byte(rp.Attributes["RedrivePolicy"]), &got); err != nil || len(rp.Attributes) != 1 ||
		got.DeadLetterTargetArn != dlqAttrs.Attributes["QueueArn"] || got.MaxReceiveCount != 3 {
		t.Errorf("get-queue-attributes --attribute-names RedrivePolicy: %v (%v); want only the redrive policy to %s after 3 receives",
			rp.Attributes, err, dlqAttrs.Attributes["QueueArn"])
	}
	var list struct{ QueueUrls []string }
	aws(&list, "sqs", "list-queues")
	for _, want := range []string{q.QueueUrl, dlq.QueueUrl, redriven.QueueUrl} {
		if !slices.Contains(list.QueueUrls, want) {
			t.Errorf("list-queues: %v, want %s among them", list.QueueUrls, want)
		}
	}
	// The control endpoint lists an empty queue's messages as [], and refuses a queue it lacks.
	for queue, want := range map[string]string{"cli-dlq": "[]\n", "no-such-queue": "no queue \"no-such-queue\"\n"} {
		resp, err := http.Get(endpoint + "/_awsfake/messages?queue=" + queue)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if string(body) != want {
			t.Errorf("/_awsfake/messages?queue=%s: %q, want %q", queue, body, want)
		}
	}
}

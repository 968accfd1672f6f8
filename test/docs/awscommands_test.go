package docs

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"capstan.dev/capstan/internal/awsevents"
)

// stubAWS stands in for the AWS CLI: it records each call and answers the two whose output the
// commands read.
const stubAWS = `aws() {
  printf '%s\n' "$*" >> calls.txt
  case "$*" in
    *"sts get-caller-identity"*) echo 111122223333 ;;
    *"sqs create-queue"*) echo https://sqs.us-east-1.amazonaws.com/111122223333/prod-east ;;
  esac
}
`

// docs/aws.md's commands for a new EKS cluster run as written (bash, the AWS CLI stubbed): the
// queue's policy is JSON that lets EventBridge send to the queue and denies requests without TLS,
// and every EventBridge rule
// sends an event kind the interruption controller reads (a rule for a kind it cannot read would
// fill the queue with messages it drops).
func TestNewClusterCommandsRun(t *testing.T) {
	doc := RepoFile(t, "docs", "aws.md")
	start := strings.Index(doc, "## A new EKS cluster, step by step")
	if start < 0 {
		t.Fatal(`docs/aws.md has no section "A new EKS cluster, step by step"`)
	}
	section := doc[start:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	script := "set -eu\n" + stubAWS
	blocks := regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(section, -1)
	if len(blocks) < 4 {
		t.Fatalf("%d shell blocks in the section; the pattern finds none", len(blocks))
	}
	for _, b := range blocks {
		for _, line := range strings.Split(b[1], "\n") {
			script += strings.TrimPrefix(line, "   ") + "\n"
		}
	}
	dir := t.TempDir()
	cmd := exec.Command("bash", "-c", script)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the commands fail: %v\n%s", err, out)
	}
	var attrs struct{ Policy string }
	b, err := os.ReadFile(filepath.Join(dir, "queue-attributes.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &attrs); err != nil {
		t.Fatalf("queue-attributes.json: %v\n%s", err, b)
	}
	var policy struct {
		Statement []struct {
			Sid       string
			Effect    string
			Principal json.RawMessage
			Action    string
			Resource  string
			Condition map[string]map[string]any
		}
	}
	if err := json.Unmarshal([]byte(attrs.Policy), &policy); err != nil {
		t.Fatalf("the queue policy: %v\n%s", err, attrs.Policy)
	}
	const queue = "arn:aws:sqs:us-east-1:111122223333:prod-east"
	sends, deniesHTTP := false, false
	for _, st := range policy.Statement {
		switch {
		case st.Effect == "Allow" && st.Action == "sqs:SendMessage" && st.Resource == queue && strings.Contains(string(st.Principal), `"events.amazonaws.com"`):
			sends = true
		case st.Effect == "Deny" && st.Action == "sqs:*" && st.Resource == queue && string(st.Principal) == `"*"` &&
			st.Condition["Bool"]["aws:SecureTransport"] == false:
			deniesHTTP = true
		}
	}
	if !sends {
		t.Errorf("the queue policy does not let EventBridge send to the queue: %s", attrs.Policy)
	}
	if !deniesHTTP {
		t.Errorf("the queue policy does not deny requests made without TLS (Karpenter's DenyHTTP): %s", attrs.Policy)
	}
	// The queue redrives to its dead-letter queue after three receives (docs/aws.md, the
	// interruption section): a message Capstan cannot handle is kept, not retried for ever.
	var create struct{ RedrivePolicy string }
	if b, err := os.ReadFile(filepath.Join(dir, "queue-create.json")); err != nil {
		t.Error(err)
	} else if err := json.Unmarshal(b, &create); err != nil {
		t.Errorf("queue-create.json: %v\n%s", err, b)
	} else {
		var redrive struct {
			DeadLetterTargetArn string `json:"deadLetterTargetArn"`
			MaxReceiveCount     string `json:"maxReceiveCount"`
		}
		if err := json.Unmarshal([]byte(create.RedrivePolicy), &redrive); err != nil || redrive.DeadLetterTargetArn != queue+"-dlq" || redrive.MaxReceiveCount != "3" {
			t.Errorf("the queue's redrive policy %q (%v), want %s-dlq after 3 receives", create.RedrivePolicy, err, queue)
		}
	}
	calls, err := os.ReadFile(filepath.Join(dir, "calls.txt"))
	if err != nil {
		t.Fatal(err)
	}
	rules := 0
	for _, call := range strings.Split(string(calls), "\n") {
		_, pattern, ok := strings.Cut(call, "--event-pattern ")
		if !ok {
			continue
		}
		rules++
		var p struct {
			Source     []string `json:"source"`
			DetailType []string `json:"detail-type"`
		}
		if err := json.Unmarshal([]byte(pattern), &p); err != nil || len(p.Source) != 1 || len(p.DetailType) != 1 {
			t.Errorf("event pattern %s: %v", pattern, err)
			continue
		}
		event, _ := json.Marshal(map[string]any{"source": p.Source[0], "detail-type": p.DetailType[0], "detail": map[string]any{}})
		if _, err := awsevents.Parse(string(event)); errors.Is(err, awsevents.ErrUnreadable) && strings.Contains(err.Error(), "detail-type") {
			t.Errorf("a rule sends %s %q, which the interruption controller does not read", p.Source[0], p.DetailType[0])
		}
	}
	if rules != 5 {
		t.Errorf("%d EventBridge rules, want the 5 kinds the interruption controller reads", rules)
	}
	if !strings.Contains(string(calls), "eks create-access-entry --cluster-name prod-east --type EC2_LINUX --principal-arn arn:aws:iam::111122223333:role/KarpenterNodeRole-prod-east") {
		t.Errorf("no access entry for the node role:\n%s", calls)
	}
}

package awsevents

import (
	"errors"
	"strings"
	"testing"
)

// FuzzParse: any queue message body is either read — every instance it names an instance id —
// or refused with ErrUnreadable (the controller deletes those instead of retrying them forever).
func FuzzParse(f *testing.F) {
	for _, body := range []string{
		`{"source":"aws.ec2","detail-type":"EC2 Spot Instance Interruption Warning","time":"2026-12-03T00:00:00Z","detail":{"instance-id":"i-0123","instance-action":"terminate"}}`,
		`{"source":"aws.ec2","detail-type":"EC2 Instance Rebalance Recommendation","time":"2026-12-03T00:00:00Z","detail":{"instance-id":"i-0123"}}`,
		`{"source":"aws.ec2","detail-type":"EC2 Capacity Reservation Instance Interruption Warning","time":"2026-12-03T00:00:00Z","detail":{"instance-id":"i-0456","instance-action":"terminate"}}`,
		`{"source":"aws.ec2","detail-type":"EC2 Instance State-change Notification","time":"2026-12-03T00:00:00Z","detail":{"instance-id":"i-0123","state":"shutting-down"}}`,
		`{"source":"aws.health","detail-type":"AWS Health Event","time":"2026-12-03T00:00:00Z","detail":{"service":"EC2","eventTypeCategory":"scheduledChange","affectedEntities":[{"entityValue":"i-1"},{"entityValue":"i-2"}]}}`,
		`{"source":"aws.ec2","detail-type":"EC2 Spot Instance Interruption Warning","detail":{"instance-id":"vol-1"}}`,
		``, `{`, `null`, `{"detail":[]}`,
	} {
		f.Add(body)
	}
	f.Fuzz(func(t *testing.T, body string) {
		m, err := Parse(body)
		if err != nil {
			if !errors.Is(err, ErrUnreadable) {
				t.Fatalf("%q: %v does not wrap ErrUnreadable", body, err)
			}
			return
		}
		for _, id := range m.Instances {
			if !strings.HasPrefix(id, "i-") {
				t.Fatalf("%q: read as naming %q, not an instance id", body, id)
			}
		}
	})
}

package interruption

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"capstan.dev/capstan/internal/awsevents"
	awsprovider "capstan.dev/capstan/internal/cloudprovider/aws"
	"capstan.dev/capstan/internal/metrics"
	"capstan.dev/capstan/internal/periodic"
)

// Health polls EC2's instance status checks and replaces the machines EC2 reports unhealthy,
// as Karpenter v1.15 does: an instance or system reachability check failed for Threshold, or a
// scheduled event (instance or system reboot, system maintenance, instance retirement or stop)
// — the host needs vacating, whenever the event is due. The NodeClaim is deleted (the
// termination controller drains it within its budgets and PDBs, provisioning replaces its pods)
// with a Warning event. It runs on AWS whether or not an interruption queue is configured. A
// leader-only Runnable.
type Health struct {
	Client   client.Client
	EC2      awsprovider.EC2API
	Clock    clock.Clock
	Recorder events.EventRecorder
	Metrics  *metrics.Metrics
	// Interval is how often the status is read (default 1 minute); Threshold how long a check
	// must have failed (default 2 minutes).
	Interval, Threshold time.Duration

	// seen are the instance/category pairs already counted; pruned once healthy again.
	seen map[[2]string]bool
}

// NeedLeaderElection implements LeaderElectionRunnable.
func (h *Health) NeedLeaderElection() bool { return true }

// Start polls until ctx ends.
func (h *Health) Start(ctx context.Context) error {
	return periodic.Run(ctx, h.Clock, cmp.Or(h.Interval, time.Minute), "reading EC2 instance status", h.Sync)
}

// statusFilters are DescribeInstanceStatus's filter sets, asked one after the other (EC2 ANDs
// the filters of one call).
var statusFilters = [][]ec2types.Filter{
	{{Name: aws.String("instance-status.status"), Values: []string{string(ec2types.SummaryStatusImpaired)}}},
	{{Name: aws.String("system-status.status"), Values: []string{string(ec2types.SummaryStatusImpaired)}}},
	{{Name: aws.String("event.code"), Values: []string{string(ec2types.EventCodeInstanceReboot), string(ec2types.EventCodeSystemReboot),
		string(ec2types.EventCodeSystemMaintenance), string(ec2types.EventCodeInstanceRetirement), string(ec2types.EventCodeInstanceStop)}}},
}

// Sync reads the unhealthy instances once and replaces Capstan's among them.
func (h *Health) Sync(ctx context.Context) error {
	threshold := cmp.Or(h.Threshold, 2*time.Minute)
	unhealthy := map[string][]string{} // instance → failed categories
	add := func(id, kind string) {
		if !slices.Contains(unhealthy[id], kind) {
			unhealthy[id] = append(unhealthy[id], kind)
		}
	}
	failedLongEnough := func(s *ec2types.InstanceStatusSummary) bool {
		if s == nil {
			return false
		}
		for _, d := range s.Details {
			if d.Status == ec2types.StatusTypeFailed && d.ImpairedSince != nil && h.Clock.Since(*d.ImpairedSince) >= threshold {
				return true
			}
		}
		return false
	}
	for _, filters := range statusFilters {
		pg := ec2.NewDescribeInstanceStatusPaginator(h.EC2, &ec2.DescribeInstanceStatusInput{Filters: filters})
		for pg.HasMorePages() {
			out, err := pg.NextPage(ctx)
			if err != nil {
				return fmt.Errorf("describing instance status: %w", err)
			}
			for _, st := range out.InstanceStatuses {
				id := aws.ToString(st.InstanceId)
				if failedLongEnough(st.InstanceStatus) {
					add(id, awsevents.InstanceStatusFailed)
				}
				if failedLongEnough(st.SystemStatus) {
					add(id, awsevents.SystemStatusFailed)
				}
				if len(st.Events) > 0 {
					add(id, awsevents.ScheduledEvent)
				}
			}
		}
	}
	if h.seen == nil {
		h.seen = map[[2]string]bool{}
	}
	now := map[[2]string]bool{}
	handler := &Controller{Client: h.Client, Recorder: h.Recorder, Metrics: h.Metrics}
	var errs []error
	for _, id := range slices.Sorted(maps.Keys(unhealthy)) {
		for _, kind := range unhealthy[id] {
			key := [2]string{id, kind}
			now[key] = true
			if !h.seen[key] {
				h.Metrics.InstanceStatusUnhealthy(kind)
			}
		}
		// The first category names the event; one deletion serves them all.
		if err := handler.Handle(ctx, awsevents.Message{Type: unhealthy[id][0], Instances: []string{id}, Time: h.Clock.Now()}); err != nil {
			errs = append(errs, err)
		}
	}
	h.seen = now
	return errors.Join(errs...)
}

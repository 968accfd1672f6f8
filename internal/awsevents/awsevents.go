// Package awsevents reads the EventBridge events Capstan's interruption queue receives (Spot
// interruption warnings, rebalance recommendations, AWS Health scheduled changes, instance state
// changes, capacity-reservation interruption warnings) into what the interruption controller
// acts on; it also names the kinds of EC2 instance-status failure the health poll reports.
package awsevents

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Message types, as karpenter_interruption_received_messages_total labels them.
const (
	SpotInterrupted         = "spot_interrupted"
	RebalanceRecommendation = "rebalance_recommendation"
	ScheduledChange         = "scheduled_change"
	InstanceStopping        = "instance_stopping"
	InstanceStopped         = "instance_stopped"
	InstanceTerminating     = "instance_terminating"
	InstanceTerminated      = "instance_terminated"
	// CapacityReservationInterrupted is an interruptible capacity reservation reclaiming one of
	// its instances.
	CapacityReservationInterrupted = "capacity_reservation_interrupted"
	Unknown                        = "unknown"
)

// Instance-status failures, as EC2's DescribeInstanceStatus reports them (not queue messages:
// Capstan polls for them).
const (
	InstanceStatusFailed = "instance_status_failed"
	SystemStatusFailed   = "system_status_failed"
	ScheduledEvent       = "scheduled_event"
)

// Message is what Capstan reads of a message: its type and the instances it is about.
type Message struct {
	Type      string
	Instances []string
	// Time is when the event happened (EventBridge's time).
	Time time.Time
	// Account and Region are the event's ("" when it names none).
	Account, Region string
}

// envelope is an EventBridge event.
type envelope struct {
	Source     string          `json:"source"`
	DetailType string          `json:"detail-type"`
	Account    string          `json:"account"`
	Region     string          `json:"region"`
	Time       time.Time       `json:"time"`
	Resources  []string        `json:"resources"`
	Detail     json.RawMessage `json:"detail"`
}

// ErrUnreadable is wrapped by Parse's errors for messages that can never be handled.
var ErrUnreadable = errors.New("unreadable interruption message")

// Parse reads an EventBridge message body.
func Parse(body string) (Message, error) {
	var e envelope
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		return Message{}, fmt.Errorf("%w: %v", ErrUnreadable, err)
	}
	m := Message{Time: e.Time, Account: e.Account, Region: e.Region}
	var d struct {
		InstanceID       string `json:"instance-id"`
		State            string `json:"state"`
		Service          string `json:"service"`
		Category         string `json:"eventTypeCategory"`
		AffectedEntities []struct {
			EntityValue string `json:"entityValue"`
		} `json:"affectedEntities"`
	}
	if len(e.Detail) > 0 {
		if err := json.Unmarshal(e.Detail, &d); err != nil {
			return Message{}, fmt.Errorf("%w: detail: %v", ErrUnreadable, err)
		}
	}
	switch {
	case e.Source == "aws.ec2" && e.DetailType == "EC2 Spot Instance Interruption Warning":
		m.Type, m.Instances = SpotInterrupted, []string{d.InstanceID}
	case e.Source == "aws.ec2" && e.DetailType == "EC2 Capacity Reservation Instance Interruption Warning":
		m.Type, m.Instances = CapacityReservationInterrupted, []string{d.InstanceID}
	case e.Source == "aws.ec2" && e.DetailType == "EC2 Instance Rebalance Recommendation":
		m.Type, m.Instances = RebalanceRecommendation, []string{d.InstanceID}
	case e.Source == "aws.ec2" && e.DetailType == "EC2 Instance State-change Notification":
		switch d.State {
		case "stopping":
			m.Type = InstanceStopping
		case "stopped":
			m.Type = InstanceStopped
		case "shutting-down":
			m.Type = InstanceTerminating
		case "terminated":
			m.Type = InstanceTerminated
		default:
			// pending, running: nothing to do.
			m.Type = Unknown
		}
		m.Instances = []string{d.InstanceID}
	case e.Source == "aws.health" && e.DetailType == "AWS Health Event":
		if d.Service != "EC2" || d.Category != "scheduledChange" {
			m.Type = Unknown
			break
		}
		m.Type = ScheduledChange
		for _, a := range d.AffectedEntities {
			m.Instances = append(m.Instances, a.EntityValue)
		}
	default:
		return Message{}, fmt.Errorf("%w: source %q, detail-type %q", ErrUnreadable, e.Source, e.DetailType)
	}
	for _, id := range m.Instances {
		if !strings.HasPrefix(id, "i-") {
			return Message{}, fmt.Errorf("%w: %q is not an instance id", ErrUnreadable, id)
		}
	}
	return m, nil
}

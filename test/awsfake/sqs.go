package awsfake

import (
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

const awsJSON10 = "application/x-amz-json-1.0"

// queue is an SQS standard queue.
type queue struct {
	name, arn         string
	visibilityTimeout time.Duration
	// dlq and maxReceives are the redrive policy.
	dlq         string
	maxReceives int
	messages    []*message
}

type message struct {
	id, body, receipt string
	sent              time.Time
	visibleAt         time.Time
	receives          int
}

// QueueMessage is a message as Messages reports it.
type QueueMessage struct {
	ID, Body string
	Receives int
}

// CreateQueue creates a queue (and makes dlq, when not empty, its dead-letter queue after
// maxReceives receives).
func (s *Server) CreateQueue(name, dlq string, maxReceives int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.createQueue(name, dlq, maxReceives, 30*time.Second)
}

func (s *Server) createQueue(name, dlq string, maxReceives int, visibility time.Duration) *queue {
	if q := s.queues[name]; q != nil {
		return q
	}
	q := &queue{name: name, arn: fmt.Sprintf("arn:aws:sqs:%s:%s:%s", s.region, s.account, name), visibilityTimeout: visibility,
		dlq: dlq, maxReceives: maxReceives}
	s.queues[name] = q
	return q
}

// SendMessage puts body on a queue.
func (s *Server) SendMessage(queueName, body string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[queueName]
	if q == nil {
		return fmt.Errorf("no queue %s", queueName)
	}
	s.send(q, body)
	return nil
}

func (s *Server) send(q *queue, body string) *message {
	m := &message{id: newUUID(), body: body, sent: s.clock.Now()}
	q.messages = append(q.messages, m)
	return m
}

// Messages are the messages on a queue (in flight or not).
func (s *Server) Messages(queueName string) []QueueMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[queueName]
	if q == nil {
		return nil
	}
	out := []QueueMessage{}
	for _, m := range q.messages {
		out = append(out, QueueMessage{ID: m.id, Body: m.body, Receives: m.receives})
	}
	return out
}

func newUUID() string {
	id := newID("") + newID("")
	return id[:8] + "-" + id[8:12] + "-" + id[12:16] + "-" + id[16:20] + "-" + id[20:32]
}

// queueFromURL finds the queue a QueueUrl names (its last path segment).
func (s *Server) queueFromURL(u string) *queue {
	return s.queues[u[strings.LastIndex(u, "/")+1:]]
}

func (s *Server) sqs(w http.ResponseWriter, r *http.Request, action string, body []byte) {
	var in struct {
		QueueName, QueueUrl, ReceiptHandle, MessageBody, QueueNamePrefix string
		Attributes                                                       map[string]string
		MaxNumberOfMessages, WaitTimeSeconds                             int
		VisibilityTimeout                                                *int
		AttributeNames                                                   []string
	}
	if err := json.Unmarshal(body, &in); err != nil {
		s.writeError(w, "sqs", Fault{Code: "InvalidParameterValue", Message: err.Error()})
		return
	}
	base := "http://" + r.Host + "/" + s.account + "/"
	notFound := Fault{Code: "QueueDoesNotExist", Message: "The specified queue does not exist."}
	switch action {
	case "CreateQueue":
		s.mu.Lock()
		vis := 30 * time.Second
		if v, err := strconv.Atoi(in.Attributes["VisibilityTimeout"]); err == nil {
			vis = time.Duration(v) * time.Second
		}
		dlq, max := "", 0
		if rp := in.Attributes["RedrivePolicy"]; rp != "" {
			var p struct {
				DeadLetterTargetArn string `json:"deadLetterTargetArn"`
				MaxReceiveCount     any    `json:"maxReceiveCount"`
			}
			if err := json.Unmarshal([]byte(rp), &p); err != nil {
				s.mu.Unlock()
				s.writeError(w, "sqs", Fault{Code: "InvalidAttributeValue", Message: "RedrivePolicy: " + err.Error()})
				return
			}
			dlq = p.DeadLetterTargetArn[strings.LastIndex(p.DeadLetterTargetArn, ":")+1:]
			max, _ = strconv.Atoi(fmt.Sprint(p.MaxReceiveCount))
		}
		s.createQueue(in.QueueName, dlq, max, vis)
		s.mu.Unlock()
		writeJSON(w, awsJSON10, map[string]string{"QueueUrl": base + in.QueueName})
	case "GetQueueUrl":
		s.mu.Lock()
		q := s.queues[in.QueueName]
		s.mu.Unlock()
		if q == nil {
			s.writeError(w, "sqs", notFound)
			return
		}
		writeJSON(w, awsJSON10, map[string]string{"QueueUrl": base + q.name})
	case "GetQueueAttributes":
		s.mu.Lock()
		q := s.queueFromURL(in.QueueUrl)
		if q == nil {
			s.mu.Unlock()
			s.writeError(w, "sqs", notFound)
			return
		}
		visible, inflight := 0, 0
		now := s.clock.Now()
		for _, m := range q.messages {
			if now.Before(m.visibleAt) {
				inflight++
			} else {
				visible++
			}
		}
		attrs := map[string]string{"QueueArn": q.arn, "ApproximateNumberOfMessages": strconv.Itoa(visible),
			"ApproximateNumberOfMessagesNotVisible": strconv.Itoa(inflight), "VisibilityTimeout": strconv.Itoa(int(q.visibilityTimeout.Seconds()))}
		if d := s.queues[q.dlq]; d != nil {
			policy, _ := json.Marshal(map[string]any{"deadLetterTargetArn": d.arn, "maxReceiveCount": q.maxReceives})
			attrs["RedrivePolicy"] = string(policy)
		}
		s.mu.Unlock()
		writeJSON(w, awsJSON10, map[string]any{"Attributes": onlyAttributes(attrs, in.AttributeNames)})
	case "ListQueues":
		s.mu.Lock()
		urls := []string{}
		for name := range s.queues {
			if strings.HasPrefix(name, in.QueueNamePrefix) {
				urls = append(urls, base+name)
			}
		}
		s.mu.Unlock()
		slices.Sort(urls)
		writeJSON(w, awsJSON10, map[string]any{"QueueUrls": urls})
	case "SendMessage":
		s.mu.Lock()
		q := s.queueFromURL(in.QueueUrl)
		if q == nil {
			s.mu.Unlock()
			s.writeError(w, "sqs", notFound)
			return
		}
		m := s.send(q, in.MessageBody)
		s.mu.Unlock()
		writeJSON(w, awsJSON10, map[string]string{"MessageId": m.id, "MD5OfMessageBody": md5Hex(m.body)})
	case "ReceiveMessage":
		s.receive(w, r, in.QueueUrl, in.MaxNumberOfMessages, in.WaitTimeSeconds, in.VisibilityTimeout)
	case "DeleteMessage":
		s.mu.Lock()
		q := s.queueFromURL(in.QueueUrl)
		if q == nil {
			s.mu.Unlock()
			s.writeError(w, "sqs", notFound)
			return
		}
		for i, m := range q.messages {
			if m.receipt == in.ReceiptHandle && in.ReceiptHandle != "" {
				q.messages = append(q.messages[:i], q.messages[i+1:]...)
				break
			}
		}
		s.mu.Unlock()
		writeJSON(w, awsJSON10, map[string]string{})
	case "ChangeMessageVisibility":
		s.mu.Lock()
		q := s.queueFromURL(in.QueueUrl)
		if q == nil {
			s.mu.Unlock()
			s.writeError(w, "sqs", notFound)
			return
		}
		for _, m := range q.messages {
			if m.receipt == in.ReceiptHandle && in.VisibilityTimeout != nil {
				m.visibleAt = s.clock.Now().Add(time.Duration(*in.VisibilityTimeout) * time.Second)
			}
		}
		s.mu.Unlock()
		writeJSON(w, awsJSON10, map[string]string{})
	default:
		s.writeError(w, "sqs", Fault{Code: "UnsupportedOperation", Message: "operation " + action + " is not served here"})
	}
}

func md5Hex(s string) string {
	sum := md5.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

// receive answers ReceiveMessage, long-polling up to wait seconds (real time).
func (s *Server) receive(w http.ResponseWriter, r *http.Request, url string, max, wait int, visibility *int) {
	if max <= 0 {
		max = 1
	}
	deadline := time.Now().Add(time.Duration(wait) * time.Second)
	for {
		s.mu.Lock()
		q := s.queueFromURL(url)
		if q == nil {
			s.mu.Unlock()
			s.writeError(w, "sqs", Fault{Code: "QueueDoesNotExist", Message: "The specified queue does not exist."})
			return
		}
		now := s.clock.Now()
		vis := q.visibilityTimeout
		if visibility != nil {
			vis = time.Duration(*visibility) * time.Second
		}
		var out []map[string]any
		for i := 0; i < len(q.messages) && len(out) < max; i++ {
			m := q.messages[i]
			if now.Before(m.visibleAt) {
				continue
			}
			if q.dlq != "" && q.maxReceives > 0 && m.receives >= q.maxReceives {
				// Received too often without being deleted: redrive to the dead-letter queue.
				q.messages = append(q.messages[:i], q.messages[i+1:]...)
				i--
				if d := s.queues[q.dlq]; d != nil {
					m.receives, m.visibleAt, m.receipt = 0, time.Time{}, ""
					d.messages = append(d.messages, m)
				}
				continue
			}
			m.receives++
			m.visibleAt = now.Add(vis)
			m.receipt = newID("rh-") + newID("")
			out = append(out, map[string]any{"MessageId": m.id, "ReceiptHandle": m.receipt, "Body": m.body, "MD5OfBody": md5Hex(m.body),
				"Attributes": map[string]string{"ApproximateReceiveCount": strconv.Itoa(m.receives),
					"SentTimestamp": strconv.FormatInt(m.sent.UnixMilli(), 10)}})
		}
		s.mu.Unlock()
		if len(out) > 0 || !time.Now().Before(deadline) || r.Context().Err() != nil {
			writeJSON(w, awsJSON10, map[string]any{"Messages": out})
			return
		}
		select {
		case <-r.Context().Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Event is an EventBridge event as it lands on an interruption queue.
type Event struct {
	Version    string         `json:"version"`
	ID         string         `json:"id"`
	DetailType string         `json:"detail-type"`
	Source     string         `json:"source"`
	Account    string         `json:"account"`
	Time       time.Time      `json:"time"`
	Region     string         `json:"region"`
	Resources  []string       `json:"resources"`
	Detail     map[string]any `json:"detail"`
}

func (s *Server) event(source, detailType, instanceID string, detail map[string]any) string {
	e := Event{Version: "0", ID: newUUID(), DetailType: detailType, Source: source, Account: s.account, Time: s.clock.Now().UTC(),
		Region: s.region, Resources: []string{fmt.Sprintf("arn:aws:ec2:%s:%s:instance/%s", s.region, s.account, instanceID)}, Detail: detail}
	b, _ := json.Marshal(e)
	return string(b)
}

// SpotInterruptionWarning is the EventBridge message of a Spot interruption warning.
func (s *Server) SpotInterruptionWarning(instanceID string) string {
	return s.event("aws.ec2", "EC2 Spot Instance Interruption Warning", instanceID,
		map[string]any{"instance-id": instanceID, "instance-action": "terminate"})
}

// RebalanceRecommendation is the EventBridge message of a rebalance recommendation.
func (s *Server) RebalanceRecommendation(instanceID string) string {
	return s.event("aws.ec2", "EC2 Instance Rebalance Recommendation", instanceID, map[string]any{"instance-id": instanceID})
}

// CapacityReservationInterruption is the EventBridge message of an interruptible capacity
// reservation reclaiming an instance.
func (s *Server) CapacityReservationInterruption(instanceID string) string {
	return s.event("aws.ec2", "EC2 Capacity Reservation Instance Interruption Warning", instanceID,
		map[string]any{"instance-id": instanceID, "instance-action": "terminate"})
}

// StateChange is the EventBridge message of an instance state change.
func (s *Server) StateChange(instanceID, state string) string {
	return s.event("aws.ec2", "EC2 Instance State-change Notification", instanceID, map[string]any{"instance-id": instanceID, "state": state})
}

// ScheduledChange is the AWS Health message of a scheduled change for instances.
func (s *Server) ScheduledChange(instanceIDs ...string) string {
	var entities []map[string]string
	for _, id := range instanceIDs {
		entities = append(entities, map[string]string{"entityValue": id})
	}
	e := Event{Version: "0", ID: newUUID(), DetailType: "AWS Health Event", Source: "aws.health", Account: s.account, Time: s.clock.Now().UTC(),
		Region: s.region, Detail: map[string]any{"service": "EC2", "eventTypeCategory": "scheduledChange",
			"eventTypeCode": "AWS_EC2_PERSISTENT_INSTANCE_RETIREMENT_SCHEDULED", "affectedEntities": entities}}
	b, _ := json.Marshal(e)
	return string(b)
}

// Events are the messages SendEvent sends, by name.
var Events = map[string]func(*Server, string) string{
	"spot-interruption":        (*Server).SpotInterruptionWarning,
	"rebalance":                (*Server).RebalanceRecommendation,
	"scheduled-change":         func(s *Server, id string) string { return s.ScheduledChange(id) },
	"state-change":             func(s *Server, id string) string { return s.StateChange(id, "stopping") },
	"reservation-interruption": (*Server).CapacityReservationInterruption,
}

// SendEvent puts the event named (a key of Events) for the instance on the queue, and returns
// the message's ID. Unlike InterruptSpot it changes no instance.
func (s *Server) SendEvent(queueName, event, instanceID string) (string, error) {
	build, ok := Events[event]
	if !ok {
		return "", fmt.Errorf("event %q: want one of %s", event, strings.Join(slices.Sorted(maps.Keys(Events)), ", "))
	}
	body := build(s, instanceID)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.instances[instanceID] == nil {
		return "", fmt.Errorf("no instance %s", instanceID)
	}
	q := s.queues[queueName]
	if q == nil {
		return "", fmt.Errorf("no queue %s", queueName)
	}
	return s.send(q, body).id, nil
}

// SpotInterruptionWarningNotice is how long a Spot instance runs after its warning.
const SpotInterruptionWarningNotice = 2 * time.Minute

// InterruptSpot is the FIS drill aws:ec2:send-spot-instance-interruptions: the warning lands on
// the queue and the instance terminates two minutes later (on the server's clock).
func (s *Server) InterruptSpot(instanceID, queueName string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	inst := s.instances[instanceID]
	if inst == nil || inst.State == "terminated" || inst.State == "shutting-down" {
		return fmt.Errorf("no live instance %s", instanceID)
	}
	if inst.Lifecycle != "spot" {
		return fmt.Errorf("instance %s is not a Spot instance", instanceID)
	}
	q := s.queues[queueName]
	if q == nil {
		return fmt.Errorf("no queue %s", queueName)
	}
	s.send(q, s.event("aws.ec2", "EC2 Spot Instance Interruption Warning", instanceID,
		map[string]any{"instance-id": instanceID, "instance-action": "terminate"}))
	inst.ReclaimAt = s.clock.Now().Add(SpotInterruptionWarningNotice)
	return nil
}

// onlyAttributes are the attributes asked for by name, as SQS answers GetQueueAttributes: all of
// them for "All" or no names.
func onlyAttributes(attrs map[string]string, names []string) map[string]string {
	if len(names) == 0 || slices.Contains(names, "All") {
		return attrs
	}
	out := map[string]string{}
	for _, n := range names {
		if v, ok := attrs[n]; ok {
			out[n] = v
		}
	}
	return out
}

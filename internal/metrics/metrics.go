// Package metrics defines Capstan's Prometheus metrics with Karpenter v1's names and labels
// (karpenter_…) so that existing dashboards and alerts work, plus Capstan's own (capstan_…). They
// are registered with controller-runtime's registry and served on /metrics.
package metrics

import (
	"runtime"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/spend"
)

// Label names, as Karpenter's.
const (
	NodePool            = "nodepool"
	Reason              = "reason"
	ResourceType        = "resource_type"
	CapacityType        = "capacity_type"
	Zone                = "zone"
	MinValuesRelaxed    = "min_values_relaxed"
	ConsolidationPolicy = "consolidation_policy"
	TerminationMode     = "termination_mode"
	Controller          = "controller"
)

// Reasons a NodeClaim is created or disrupted, as Karpenter names them.
const (
	ReasonProvisioned          = "provisioned"
	ReasonExpired              = "expired"
	ReasonGarbageCollected     = "garbage_collected"
	ReasonInsufficientCapacity = "insufficient_capacity"
	ReasonNodeClassNotReady    = "nodeclass_not_ready"
	ReasonRegistrationTimeout  = "registration_timeout"
	ReasonLaunchTimeout        = "launch_timeout"
	// ReasonInvalidNodeClaim is Capstan's own: a claim holding a taint or label no node could
	// register with (cloudprovider.InvalidNodeClaimError).
	ReasonInvalidNodeClaim = "invalid_nodeclaim"
)

// Metrics are Capstan's metrics, registered once per Registry.
type Metrics struct {
	NodeClaimsCreated     *prometheus.CounterVec
	NodeClaimsLaunched    *prometheus.CounterVec
	NodeClaimsRegistered  *prometheus.CounterVec
	NodeClaimsInitialized *prometheus.CounterVec
	NodeClaimsTerminated  *prometheus.CounterVec
	NodeClaimsDisrupted   *prometheus.CounterVec
	NodesCreated          *prometheus.CounterVec
	NodesTerminated       *prometheus.CounterVec
	SchedulingDuration    *prometheus.HistogramVec
	QueueDepth            *prometheus.GaugeVec
	UnschedulablePods     *prometheus.GaugeVec
	PodStartupDuration    prometheus.Summary
	BuildInfo             *prometheus.GaugeVec
	NodePoolUsage         *prometheus.GaugeVec
	NodePoolLimit         *prometheus.GaugeVec
	NodePoolCost          *prometheus.GaugeVec
	// ClusterSpend and ClusterSpendingLimit are what every NodeClaim counts against the
	// cluster's spending limit and the limit, in dollars per hour (set only with a limit).
	ClusterSpend, ClusterSpendingLimit prometheus.Gauge
	NodePoolRollout                    *prometheus.GaugeVec
	// Voluntary disruption (the disruption controller).
	DisruptionDecisions *prometheus.CounterVec
	DisruptionEligible  *prometheus.GaugeVec
	AllowedDisruptions  *prometheus.GaugeVec
	PodsDisrupted       *prometheus.CounterVec
	DisruptionSavings   *prometheus.CounterVec

	InterruptionReceived *prometheus.CounterVec
	InterruptionDeleted  prometheus.Counter
	InterruptionLatency  prometheus.Histogram
	InstanceUnhealthy    *prometheus.CounterVec
}

func counter(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

func gauge(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
}

// New makes the metrics and registers them with reg.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		NodeClaimsCreated: counter("karpenter_nodeclaims_created_total", "NodeClaims created, by reason, NodePool and whether minValues was relaxed.",
			Reason, NodePool, MinValuesRelaxed),
		NodeClaimsLaunched:    counter("karpenter_nodeclaims_launched_total", "NodeClaims whose machine was launched, by NodePool.", NodePool),
		NodeClaimsRegistered:  counter("karpenter_nodeclaims_registered_total", "NodeClaims whose node registered, by NodePool.", NodePool),
		NodeClaimsInitialized: counter("karpenter_nodeclaims_initialized_total", "NodeClaims whose node initialized, by NodePool.", NodePool),
		NodeClaimsTerminated: counter("karpenter_nodeclaims_terminated_total", "NodeClaims terminated, by NodePool, capacity type and zone.",
			NodePool, CapacityType, Zone),
		NodeClaimsDisrupted: counter("karpenter_nodeclaims_disrupted_total",
			"NodeClaims disrupted, by reason (expired, insufficient_capacity, launch_timeout …), NodePool, capacity type, consolidation policy and termination mode.",
			Reason, NodePool, CapacityType, ConsolidationPolicy, TerminationMode),
		NodesCreated:    counter("karpenter_nodes_created_total", "Nodes registered for Capstan's NodeClaims, by NodePool and zone.", NodePool, Zone),
		NodesTerminated: counter("karpenter_nodes_terminated_total", "Nodes Capstan terminated, by NodePool and zone.", NodePool, Zone),
		SchedulingDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "karpenter_scheduler_scheduling_duration_seconds",
			Help: "Duration of scheduling simulations, by controller.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}, []string{Controller}),
		QueueDepth: gauge("karpenter_scheduler_queue_depth", "Pods the last scheduling simulation had to place, by controller.", Controller),
		UnschedulablePods: gauge("karpenter_scheduler_unschedulable_pods_count",
			"Pods the last scheduling simulation could not place, by controller.", Controller),
		PodStartupDuration: prometheus.NewSummary(prometheus.SummaryOpts{Name: "karpenter_pods_startup_duration_seconds",
			Help: "Time from a pod's creation until it is running and ready.", Objectives: map[float64]float64{0: 0, 0.5: 0.05, 0.9: 0.01, 0.99: 0.001, 1: 0}}),
		BuildInfo: gauge("karpenter_build_info", "Always 1, labelled with the build of the running binary.", "version", "goversion", "goarch", "commit"),
		NodePoolUsage: gauge("karpenter_nodepools_usage", "Capacity of a NodePool's NodeClaims, by resource (resource_type as Karpenter spells it: ephemeral_storage).",
			NodePool, ResourceType),
		NodePoolLimit: gauge("karpenter_nodepools_limit", "A NodePool's limits, by resource.", NodePool, ResourceType),
		NodePoolCost:  gauge("capstan_nodepool_cost_dollars_per_hour", "Hourly price of a NodePool's launched machines.", NodePool),
		ClusterSpend: prometheus.NewGauge(prometheus.GaugeOpts{Name: "capstan_cluster_spend_dollars_per_hour",
			Help: "What every NodeClaim counts against the cluster's spending limit (in-flight ones at the most they may cost), in dollars per hour."}),
		ClusterSpendingLimit: prometheus.NewGauge(prometheus.GaugeOpts{Name: "capstan_cluster_spending_limit_dollars_per_hour",
			Help: "The cluster's spending limit (SPENDING_LIMIT), in dollars per hour."}),
		NodePoolRollout: gauge("capstan_nodepool_rollout_nodes",
			"A NodePool's nodes by where a rollout of its template or NodeClass has them: up_to_date, drifted (waiting), replacing.", NodePool, "state"),
		DisruptionDecisions: counter("karpenter_voluntary_disruption_decisions_total",
			"Voluntary disruption commands carried out, by decision (delete, replace), reason (empty, drifted, underutilized) and consolidation type (empty, single, multi; empty for drift).",
			"decision", Reason, "consolidation_type"),
		DisruptionEligible: gauge("karpenter_voluntary_disruption_eligible_nodes",
			"Nodes a voluntary disruption method could act on in the last round, before budgets and simulation, by reason.", Reason),
		AllowedDisruptions: gauge("karpenter_nodepools_allowed_disruptions",
			"Nodes a NodePool's budgets allow to be disrupted now, by reason.", NodePool, Reason),
		PodsDisrupted: counter("karpenter_pods_disrupted_total",
			"Pods on nodes deleted by voluntary disruption (they are evicted by the drain), by NodePool and reason.", NodePool, Reason),
		DisruptionSavings: counter("capstan_disruption_savings_dollars_per_hour",
			"Hourly price saved by voluntary disruption commands, summed over the commands carried out, by NodePool and reason.", NodePool, Reason),
		InterruptionReceived: counter("karpenter_interruption_received_messages_total",
			"Messages received from the interruption queue, by message type (spot_interrupted, rebalance_recommendation, scheduled_change, instance_stopping, instance_stopped, instance_terminating, instance_terminated, capacity_reservation_interrupted, unknown).", "message_type"),
		InstanceUnhealthy: counter("karpenter_interruption_instance_status_unhealthy_total",
			"Instances EC2's status checks report unhealthy (counted once per instance and category while it stays so), by category (instance_status_failed, system_status_failed, scheduled_event).", "category"),
		InterruptionDeleted: prometheus.NewCounter(prometheus.CounterOpts{Name: "karpenter_interruption_deleted_messages_total",
			Help: "Messages deleted from the interruption queue (handled, or unreadable)."}),
		InterruptionLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "karpenter_interruption_message_queue_duration_seconds",
			Help: "Time from a message's arrival on the interruption queue until it was handled and deleted.", Buckets: prometheus.ExponentialBuckets(0.01, 2, 16)}),
	}
	for _, c := range m.collectors() {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// collectors are the metrics New registers.
func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.NodeClaimsCreated, m.NodeClaimsLaunched, m.NodeClaimsRegistered, m.NodeClaimsInitialized,
		m.NodeClaimsTerminated, m.NodeClaimsDisrupted, m.NodesCreated, m.NodesTerminated, m.SchedulingDuration, m.QueueDepth,
		m.UnschedulablePods, m.PodStartupDuration, m.BuildInfo, m.NodePoolUsage, m.NodePoolLimit, m.NodePoolCost,
		m.DisruptionDecisions, m.DisruptionEligible, m.AllowedDisruptions, m.PodsDisrupted, m.DisruptionSavings,
		m.InterruptionReceived, m.InterruptionDeleted, m.InterruptionLatency, m.InstanceUnhealthy, m.NodePoolRollout,
		m.ClusterSpend, m.ClusterSpendingLimit}
}

// Registry is controller-runtime's registry, served on the manager's /metrics.
func Registry() prometheus.Registerer { return crmetrics.Registry }

// ResourceTypeValue is a resource name as Karpenter writes it in resource_type: lower case, "-"
// as "_" — but for Capstan's spending limit, which keeps its key's spelling
// (capstan.dev/dollars-per-hour): it is Capstan's own, no dashboard of Karpenter's reads it, and
// a user looks for it as written in spec.limits.
func ResourceTypeValue(name string) string {
	if name == string(spend.LimitKey) {
		return name
	}
	return strings.ReplaceAll(strings.ToLower(name), "-", "_")
}

// The helpers below do nothing on a nil *Metrics, so controllers work without metrics (tests).

// Build publishes karpenter_build_info.
func (m *Metrics) Build(version, commit string) {
	if m != nil {
		m.BuildInfo.WithLabelValues(version, runtime.Version(), runtime.GOARCH, commit).Set(1)
	}
}

// Created counts a created NodeClaim.
func (m *Metrics) Created(pool, reason string, minValuesRelaxed bool) {
	if m != nil {
		relaxed := "false"
		if minValuesRelaxed {
			relaxed = "true"
		}
		m.NodeClaimsCreated.WithLabelValues(reason, pool, relaxed).Inc()
	}
}

// Launched counts a launched NodeClaim.
func (m *Metrics) Launched(pool string) {
	if m != nil {
		m.NodeClaimsLaunched.WithLabelValues(pool).Inc()
	}
}

// Registered counts a registered NodeClaim and its new Node.
func (m *Metrics) Registered(nc *karpv1.NodeClaim) {
	if m != nil {
		pool := nc.Labels[karpv1.NodePoolLabelKey]
		m.NodeClaimsRegistered.WithLabelValues(pool).Inc()
		m.NodesCreated.WithLabelValues(pool, nc.Labels[karpv1.ZoneLabelKey]).Inc()
	}
}

// Initialized counts an initialized NodeClaim.
func (m *Metrics) Initialized(pool string) {
	if m != nil {
		m.NodeClaimsInitialized.WithLabelValues(pool).Inc()
	}
}

// Terminated counts a terminated NodeClaim, and its Node when it had one.
func (m *Metrics) Terminated(nc *karpv1.NodeClaim, hadNode bool) {
	if m == nil {
		return
	}
	pool, zone := nc.Labels[karpv1.NodePoolLabelKey], nc.Labels[karpv1.ZoneLabelKey]
	m.NodeClaimsTerminated.WithLabelValues(pool, nc.Labels[karpv1.CapacityTypeLabelKey], zone).Inc()
	if hadNode {
		m.NodesTerminated.WithLabelValues(pool, zone).Inc()
	}
}

// Disrupted counts a NodeClaim deleted by Capstan, with why. The consolidation policy and
// termination mode are those of voluntary disruption and empty for these reasons.
func (m *Metrics) Disrupted(nc *karpv1.NodeClaim, reason string) {
	if m != nil {
		m.NodeClaimsDisrupted.WithLabelValues(reason, nc.Labels[karpv1.NodePoolLabelKey], nc.Labels[karpv1.CapacityTypeLabelKey], "", "").Inc()
	}
}

// DisruptedVoluntarily counts a NodeClaim deleted by a voluntary disruption command, with its
// reason (empty, drifted, underutilized) and its NodePool's consolidation policy; the termination
// mode is graceful.
func (m *Metrics) DisruptedVoluntarily(nc *karpv1.NodeClaim, reason, policy string) {
	if m != nil {
		m.NodeClaimsDisrupted.WithLabelValues(reason, nc.Labels[karpv1.NodePoolLabelKey], nc.Labels[karpv1.CapacityTypeLabelKey], policy, "graceful").Inc()
	}
}

// Scheduled records one scheduling simulation of a controller: its duration, how many pods it
// had to place and how many it could not.
func (m *Metrics) Scheduled(controller string, seconds float64, pods, unschedulable int) {
	if m != nil {
		m.SchedulingDuration.WithLabelValues(controller).Observe(seconds)
		m.QueueDepth.WithLabelValues(controller).Set(float64(pods))
		m.UnschedulablePods.WithLabelValues(controller).Set(float64(unschedulable))
	}
}

// PodStarted records a pod's time from creation to running and ready.
func (m *Metrics) PodStarted(seconds float64) {
	if m != nil {
		m.PodStartupDuration.Observe(seconds)
	}
}

// PoolStatus records a NodePool's usage, limits and cost, replacing what was recorded before (a
// limit removed from the pool disappears).
func (m *Metrics) PoolStatus(pool string, usage, limits map[string]float64, cost float64) {
	if m == nil {
		return
	}
	m.NodePoolUsage.DeletePartialMatch(prometheus.Labels{NodePool: pool})
	m.NodePoolLimit.DeletePartialMatch(prometheus.Labels{NodePool: pool})
	for r, v := range usage {
		m.NodePoolUsage.WithLabelValues(pool, ResourceTypeValue(r)).Set(v)
	}
	for r, v := range limits {
		m.NodePoolLimit.WithLabelValues(pool, ResourceTypeValue(r)).Set(v)
	}
	m.NodePoolCost.WithLabelValues(pool).Set(cost)
}

// ClusterSpending records the cluster's spending limit and what is left of it, in dollars per hour.
func (m *Metrics) ClusterSpending(limit, left float64) {
	if m == nil {
		return
	}
	m.ClusterSpendingLimit.Set(limit)
	m.ClusterSpend.Set(limit - left)
}

// PoolRollout records where a rollout has the pool's nodes.
func (m *Metrics) PoolRollout(pool string, upToDate, drifted, replacing int) {
	if m == nil {
		return
	}
	m.NodePoolRollout.WithLabelValues(pool, "up_to_date").Set(float64(upToDate))
	m.NodePoolRollout.WithLabelValues(pool, "drifted").Set(float64(drifted))
	m.NodePoolRollout.WithLabelValues(pool, "replacing").Set(float64(replacing))
}

// PoolDeleted removes every series of a deleted NodePool.
func (m *Metrics) PoolDeleted(pool string) {
	if m == nil {
		return
	}
	for _, v := range []*prometheus.GaugeVec{m.NodePoolUsage, m.NodePoolLimit, m.NodePoolCost, m.NodePoolRollout} {
		v.DeletePartialMatch(prometheus.Labels{NodePool: pool})
	}
}

// DisruptionRound records what a disruption round saw: per reason the eligible nodes, per pool
// and reason the disruptions its budgets allow (reasons lower-case, as Karpenter's).
func (m *Metrics) DisruptionRound(eligible map[string]int, allowed map[string]map[string]int) {
	if m == nil {
		return
	}
	for r, n := range eligible {
		m.DisruptionEligible.WithLabelValues(strings.ToLower(r)).Set(float64(n))
	}
	for pool, byReason := range allowed {
		for r, n := range byReason {
			m.AllowedDisruptions.WithLabelValues(pool, strings.ToLower(r)).Set(float64(n))
		}
	}
}

// DisruptionCommand counts a disruption command carried out: its decision (delete or replace),
// reason and consolidation type, the pods on its candidates, and the hourly saving, per pool.
func (m *Metrics) DisruptionCommand(decision, reason, consolidationType string, podsByPool map[string]int, savingsByPool map[string]float64) {
	if m == nil {
		return
	}
	reason = strings.ToLower(reason)
	m.DisruptionDecisions.WithLabelValues(decision, reason, consolidationType).Inc()
	for pool, n := range podsByPool {
		m.PodsDisrupted.WithLabelValues(pool, reason).Add(float64(n))
	}
	for pool, v := range savingsByPool {
		if v > 0 {
			m.DisruptionSavings.WithLabelValues(pool, reason).Add(v)
		}
	}
}

// InterruptionMessage counts a message received from the interruption queue.
func (m *Metrics) InterruptionMessage(messageType string) {
	if m != nil {
		m.InterruptionReceived.WithLabelValues(messageType).Inc()
	}
}

// InstanceStatusUnhealthy counts an instance newly found unhealthy in a category.
func (m *Metrics) InstanceStatusUnhealthy(category string) {
	if m != nil {
		m.InstanceUnhealthy.WithLabelValues(category).Inc()
	}
}

// InterruptionDeletedMessage counts a message deleted from the queue, and how long it waited
// there (a negative age, an unknown arrival, is not observed).
func (m *Metrics) InterruptionDeletedMessage(age time.Duration) {
	if m != nil {
		m.InterruptionDeleted.Inc()
		if age >= 0 {
			m.InterruptionLatency.Observe(age.Seconds())
		}
	}
}

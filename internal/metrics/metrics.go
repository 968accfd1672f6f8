// Package metrics defines Capstan's Prometheus metrics, named as Karpenter names its own
// (karpenter_…) so that existing dashboards work, plus Capstan's own (capstan_…). They are
// registered with controller-runtime's registry and served on /metrics.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Label names.
const (
	NodePool     = "nodepool"
	Reason       = "reason"
	ResourceType = "resource_type"
)

// Metrics are Capstan's metrics, registered once per Registry.
type Metrics struct {
	NodeClaimsCreated     *prometheus.CounterVec
	NodeClaimsLaunched    *prometheus.CounterVec
	NodeClaimsRegistered  *prometheus.CounterVec
	NodeClaimsInitialized *prometheus.CounterVec
	NodeClaimsTerminated  *prometheus.CounterVec
	NodeClaimsDisrupted   *prometheus.CounterVec
	SchedulingDuration    prometheus.Histogram
	PodsUnschedulable     prometheus.Gauge
	NodePoolUsage         *prometheus.GaugeVec
	NodePoolLimit         *prometheus.GaugeVec
	NodePoolCost          *prometheus.GaugeVec
}

// New makes the metrics and registers them with reg.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		NodeClaimsCreated: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "karpenter_nodeclaims_created_total",
			Help: "NodeClaims created, by NodePool and reason."}, []string{NodePool, Reason}),
		NodeClaimsLaunched: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "karpenter_nodeclaims_launched_total",
			Help: "NodeClaims whose machine was launched, by NodePool."}, []string{NodePool}),
		NodeClaimsRegistered: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "karpenter_nodeclaims_registered_total",
			Help: "NodeClaims whose node registered, by NodePool."}, []string{NodePool}),
		NodeClaimsInitialized: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "karpenter_nodeclaims_initialized_total",
			Help: "NodeClaims whose node initialized, by NodePool."}, []string{NodePool}),
		NodeClaimsTerminated: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "karpenter_nodeclaims_terminated_total",
			Help: "NodeClaims terminated, by NodePool."}, []string{NodePool}),
		NodeClaimsDisrupted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "karpenter_nodeclaims_disrupted_total",
			Help: "NodeClaims disrupted, by NodePool and reason (expired, insufficient_capacity, registration_timeout …)."}, []string{NodePool, Reason}),
		SchedulingDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "karpenter_provisioner_scheduling_duration_seconds",
			Help: "Duration of one scheduling simulation.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
		PodsUnschedulable: prometheus.NewGauge(prometheus.GaugeOpts{Name: "karpenter_provisioner_scheduling_queue_depth",
			Help: "Pods the last provisioning pass could not place."}),
		NodePoolUsage: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "karpenter_nodepools_usage",
			Help: "Capacity of a NodePool's NodeClaims, by resource."}, []string{NodePool, ResourceType}),
		NodePoolLimit: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "karpenter_nodepools_limit",
			Help: "A NodePool's limits, by resource."}, []string{NodePool, ResourceType}),
		NodePoolCost: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "capstan_nodepool_cost_dollars_per_hour",
			Help: "Hourly price of a NodePool's launched machines."}, []string{NodePool}),
	}
	for _, c := range []prometheus.Collector{m.NodeClaimsCreated, m.NodeClaimsLaunched, m.NodeClaimsRegistered, m.NodeClaimsInitialized,
		m.NodeClaimsTerminated, m.NodeClaimsDisrupted, m.SchedulingDuration, m.PodsUnschedulable, m.NodePoolUsage, m.NodePoolLimit, m.NodePoolCost} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Registry is controller-runtime's registry, served on the manager's /metrics.
func Registry() prometheus.Registerer { return crmetrics.Registry }

// The helpers below do nothing on a nil *Metrics, so controllers work without metrics (tests).

// Created counts a created NodeClaim.
func (m *Metrics) Created(pool, reason string) {
	if m != nil {
		m.NodeClaimsCreated.WithLabelValues(pool, reason).Inc()
	}
}

// Launched counts a launched NodeClaim.
func (m *Metrics) Launched(pool string) {
	if m != nil {
		m.NodeClaimsLaunched.WithLabelValues(pool).Inc()
	}
}

// Registered counts a registered NodeClaim.
func (m *Metrics) Registered(pool string) {
	if m != nil {
		m.NodeClaimsRegistered.WithLabelValues(pool).Inc()
	}
}

// Initialized counts an initialized NodeClaim.
func (m *Metrics) Initialized(pool string) {
	if m != nil {
		m.NodeClaimsInitialized.WithLabelValues(pool).Inc()
	}
}

// Terminated counts a terminated NodeClaim.
func (m *Metrics) Terminated(pool string) {
	if m != nil {
		m.NodeClaimsTerminated.WithLabelValues(pool).Inc()
	}
}

// Disrupted counts a NodeClaim deleted by Capstan, with why.
func (m *Metrics) Disrupted(pool, reason string) {
	if m != nil {
		m.NodeClaimsDisrupted.WithLabelValues(pool, reason).Inc()
	}
}

// Scheduled records one scheduling simulation.
func (m *Metrics) Scheduled(seconds float64, unschedulable int) {
	if m != nil {
		m.SchedulingDuration.Observe(seconds)
		m.PodsUnschedulable.Set(float64(unschedulable))
	}
}

// PoolStatus records a NodePool's usage, limits and cost.
func (m *Metrics) PoolStatus(pool string, usage, limits map[string]float64, cost float64) {
	if m == nil {
		return
	}
	for r, v := range usage {
		m.NodePoolUsage.WithLabelValues(pool, r).Set(v)
	}
	for r, v := range limits {
		m.NodePoolLimit.WithLabelValues(pool, r).Set(v)
	}
	m.NodePoolCost.WithLabelValues(pool).Set(cost)
}

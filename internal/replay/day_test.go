package replay_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/disruptionplan"
	"capstan.dev/capstan/internal/replay"
)

// diurnal is a seeded day of four workloads: a web tier and an API following the day (peaks in
// the afternoon, with noise per 10-minute slot), batch bursts of 45 minutes every four hours,
// and a constant pool of workers.
func diurnal(seed uint64) []replay.Deployment {
	rng := rand.New(rand.NewPCG(seed, seed))
	noise := make([]int, 24*6+1)
	for i := range noise {
		noise[i] = rng.IntN(11) - 5
	}
	day := func(at time.Duration) float64 {
		// 0 at 02:00, 1 at 14:00.
		return (1 - math.Cos(2*math.Pi*(at.Hours()-2)/24)) / 2
	}
	slot := func(at time.Duration) int { return noise[int(at/(10*time.Minute))%len(noise)] }
	return []replay.Deployment{
		{Name: "web", CPU: "500m", Memory: "1Gi", Replicas: func(at time.Duration) int { return max(0, 20+int(60*day(at))+slot(at)) }},
		{Name: "api", CPU: "1", Memory: "2Gi", Replicas: func(at time.Duration) int { return max(0, 10+int(30*day(at))+slot(at)/2) }},
		{Name: "batch", CPU: "2", Memory: "4Gi", Replicas: func(at time.Duration) int {
			if at%(4*time.Hour) < 45*time.Minute {
				return 40
			}
			return 0
		}},
		{Name: "workers", CPU: "250m", Memory: "512Mi", Replicas: func(time.Duration) int { return 30 }},
	}
}

// BenchmarkReplayDay plays the seeded day through provisioning and each consolidation policy (and
// none) on a one-minute step, and reports the day's cost, evictions and pod-seconds pending.
func BenchmarkReplayDay(b *testing.B) {
	type run struct {
		policy                   string
		noPlanning, deletionCost bool
	}
	runs := []run{{policy: "none"}, {policy: string(karpv1.ConsolidationPolicyWhenEmpty)}, {policy: string(karpv1.ConsolidationPolicyBalanced)},
		{policy: string(karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized)},
		{policy: string(karpv1.ConsolidationPolicyBalanced), noPlanning: true},
		{policy: string(karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized), noPlanning: true},
		{policy: string(karpv1.ConsolidationPolicyWhenEmpty), deletionCost: true},
		{policy: string(karpv1.ConsolidationPolicyBalanced), deletionCost: true},
		{policy: string(karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized), deletionCost: true}}
	for _, rn := range runs {
		name := fmt.Sprintf("policy=%s", rn.policy)
		if rn.noPlanning {
			name += "/planning=off"
		}
		if rn.deletionCost {
			name += "/deletion-cost=on"
		}
		b.Run(name, func(b *testing.B) {
			policy := rn.policy
			var r replay.Report
			for b.Loop() {
				np := onDemandPool(karpv1.ConsolidationPolicy(policy))
				if policy == "none" {
					np = onDemandPool(karpv1.ConsolidationPolicyWhenEmpty)
				}
				c, err := replay.New(replay.Config{NodePool: np, InstanceTypes: simCatalog(b), Step: time.Minute, DisableDisruption: policy == "none",
					Disruption: disruptionplan.Options{DisablePlanning: rn.noPlanning}, PodDeletionCost: rn.deletionCost})
				if err != nil {
					b.Fatal(err)
				}
				r = c.Run(diurnal(42), 24*time.Hour)
			}
			commands := 0
			for _, n := range r.Commands {
				commands += n
			}
			b.ReportMetric(r.CostHours, "$-day")
			b.ReportMetric(float64(r.Evictions), "evictions")
			b.ReportMetric(float64(r.Reevictions), "evictions-twice")
			b.ReportMetric(r.PendingPodSeconds, "pod-s-pending")
			b.ReportMetric(float64(commands), "commands")
			b.ReportMetric(float64(r.Commands[disruptionplan.MethodEmptiness]), "empty")
			b.ReportMetric(float64(r.Commands[disruptionplan.MethodMultiNode]+r.Commands[disruptionplan.MethodSingleNode]), "consolidations")
			b.ReportMetric(float64(r.Launched), "launched")
			b.ReportMetric(float64(r.PeakNodes), "peak-nodes")
		})
	}
}

// BenchmarkReplayDays plays five seeded days (deletion costs on) under WhenEmptyOrUnderutilized
// as Karpenter runs it (every saving taken), with Capstan's score of moves (k = 3, with and
// without the falling load's bar after a scale-down, and without the wait for scale-downs in
// progress) and under Balanced (with and without that wait), and reports the five
// days' cost and evictions summed: one day's figures hang on a
// few decisions, five show the trend.
func BenchmarkReplayDays(b *testing.B) {
	for _, rn := range []struct {
		name   string
		policy karpv1.ConsolidationPolicy
		k      float64
		calm   time.Duration
		noWait bool
	}{
		{"WhenEmptyOrUnderutilized/k=off", karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized, -1, 0, false},
		{"WhenEmptyOrUnderutilized/k=3", karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized, disruptionplan.DefaultUnderutilizedK, 0, false},
		{"WhenEmptyOrUnderutilized/k=3/calm=off", karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized, disruptionplan.DefaultUnderutilizedK, -1, false},
		{"WhenEmptyOrUnderutilized/k=3/wait=off", karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized, disruptionplan.DefaultUnderutilizedK, 0, true},
		{"Balanced", karpv1.ConsolidationPolicyBalanced, 0, 0, false},
		{"Balanced/wait=off", karpv1.ConsolidationPolicyBalanced, 0, 0, true},
	} {
		b.Run(rn.name, func(b *testing.B) {
			var cost float64
			var evictions, twice int
			for b.Loop() {
				cost, evictions, twice = 0, 0, 0
				for _, seed := range []uint64{1, 2, 3, 7, 42} {
					c, err := replay.New(replay.Config{NodePool: onDemandPool(rn.policy), InstanceTypes: simCatalog(b), Step: time.Minute,
						Disruption: disruptionplan.Options{UnderutilizedK: rn.k, CalmAfterScaleDown: rn.calm, DisableScaleDownWait: rn.noWait}, PodDeletionCost: true})
					if err != nil {
						b.Fatal(err)
					}
					r := c.Run(diurnal(seed), 24*time.Hour)
					cost += r.CostHours
					evictions += r.Evictions
					twice += r.Reevictions
				}
			}
			b.ReportMetric(cost, "$-5days")
			b.ReportMetric(float64(evictions), "evictions")
			b.ReportMetric(float64(twice), "evictions-twice")
		})
	}
}

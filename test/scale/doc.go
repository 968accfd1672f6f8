// Package scale is Capstan's scale benchmark on the local cluster: tens of thousands of pods on
// thousands of simulated machines over several NodePools with spread and affinity, a burst of
// pending pods turned into NodeClaims, then a scale-down consolidated. BenchmarkScale reports the
// burst's and the scale-down's times, Capstan's CPU, peak RSS, API requests per second and queue
// depths, and fails when the run breaks an invariant (a claim with other than one machine, a Node
// that is not its claim's machine, the pods listed once per pod). Its size is a setting, so the
// same benchmark runs on a laptop and on a large machine (docs/benchmarks.md, "Scale").
package scale

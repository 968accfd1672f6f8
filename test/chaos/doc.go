// Package chaos is the chaos suite: scenarios that hurt a running Capstan on a local cluster with
// the simulated cloud — kills at seeded random moments and at named crash points
// (internal/crashpoint) — and check what must hold afterwards, printing one line of figures per
// scenario. `make chaos` runs the full versions (CAPSTAN_CHAOS=full); `make test` runs the short
// ones. docs/reliability.md has the table.
package chaos

// Package autoscaling runs Capstan end to end: a local cluster (API server, controller manager,
// scheduler, kwok) and the capstan binary on the simulated cloud, driven through the API as a user
// would — deployments scaled up and down, tainted NodePools, limits, injected failures, restarts.
package autoscaling

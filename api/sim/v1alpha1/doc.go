// Package v1alpha1 holds capstan.dev/v1alpha1 SimNodeClass: the settings of Capstan's simulated
// cloud (zones, catalog, prices, delays, injected failures), used for local runs, end-to-end
// tests, benchmarks and what-if simulation.
//
// +kubebuilder:object:generate=true
// +groupName=capstan.dev
package v1alpha1

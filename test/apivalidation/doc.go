// Package apivalidation tests Capstan's CRDs on a real kube-apiserver: which manifests are
// accepted, which are rejected and with what message, which defaults are applied, which fields
// are immutable, and what kubectl prints.
package apivalidation

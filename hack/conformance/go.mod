// Karpenter's end-to-end suites, built as an external conformance test against Capstan: this
// module only pins the version (and, in go.sum, every module it builds with) from which
// hack/conformance.sh builds the suites' test binaries. Nothing of it is imported by Capstan.
module capstan.dev/conformance

go 1.27.0

require sigs.k8s.io/karpenter v1.15.0 // indirect

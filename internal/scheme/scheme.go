// Package scheme builds the runtime.Scheme Capstan's clients use: Kubernetes' built-in types plus
// the karpenter.sh, karpenter.k8s.aws and capstan.dev types.
package scheme

import (
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	autoscalingv1 "capstan.dev/capstan/api/autoscaling/v1"
	autoscalingv1beta1 "capstan.dev/capstan/api/autoscaling/v1beta1"
	awsv1 "capstan.dev/capstan/api/aws/v1"
	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	karpv1alpha1 "capstan.dev/capstan/api/karpenter/v1alpha1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
)

// New returns a new scheme with every type Capstan reads or writes.
func New() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme,
		apiextensionsv1.AddToScheme,
		karpv1.AddToScheme,
		karpv1alpha1.AddToScheme,
		autoscalingv1beta1.AddToScheme,
		autoscalingv1.AddToScheme,
		awsv1.AddToScheme,
		simv1alpha1.AddToScheme,
	} {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("building scheme: %w", err)
		}
	}
	return s, nil
}

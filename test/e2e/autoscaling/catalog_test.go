package autoscaling

import (
	"k8s.io/apimachinery/pkg/api/resource"

	"capstan.dev/capstan/internal/catalog"
)

var catalogEntries, _ = catalog.Load()

// catalogCPU is an instance type's CPU count from the embedded catalog.
func catalogCPU(name string) resource.Quantity {
	for _, e := range catalogEntries {
		if e.Name == name {
			return resource.MustParse(e.Labels["karpenter.k8s.aws/instance-cpu"])
		}
	}
	return resource.Quantity{}
}

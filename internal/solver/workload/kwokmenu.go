package workload

import (
	"fmt"
	"strings"

	"capstan.dev/capstan/internal/catalog"
	"capstan.dev/capstan/internal/cloudprovider"
)

// MenuFamily is a family of KWOKMenu: its name, GiB per vCPU and on-demand $/vCPU-h.
type MenuFamily struct {
	Name        string
	GiBPerCPU   int
	PricePerCPU float64
}

// KWOKMenu is a kwok-format menu (read with catalog.ParseKWOK, so 100m and 10Mi are reserved per
// node as Karpenter's kwok provider does) of amd64 Linux types <family>-<n>x for n from 1 to 96,
// each offered as spot and on-demand in zone-a, zone-b and zone-c at prices in proportion to n
// (spot at 70% of on-demand): the shape of the menu of the side-by-side with Karpenter.
func KWOKMenu(families ...MenuFamily) ([]*cloudprovider.InstanceType, error) {
	var entries []string
	for _, f := range families {
		for _, n := range []int{1, 2, 4, 8, 16, 32, 48, 64, 96} {
			var offers []string
			for _, ct := range []struct {
				name  string
				price float64
			}{{"spot", 0.7 * f.PricePerCPU * float64(n)}, {"on-demand", f.PricePerCPU * float64(n)}} {
				for _, z := range []string{"zone-a", "zone-b", "zone-c"} {
					offers = append(offers, fmt.Sprintf(`{"Price": %g, "Available": true, "Requirements": [`+
						`{"key": "karpenter.sh/capacity-type", "operator": "In", "values": [%q]},`+
						`{"key": "topology.kubernetes.io/zone", "operator": "In", "values": [%q]}]}`, ct.price, ct.name, z))
				}
			}
			entries = append(entries, fmt.Sprintf(`{"name": "%s-%dx-amd64-linux", "architecture": "amd64", "operatingSystems": ["linux"],`+
				`"resources": {"cpu": "%d", "memory": "%dGi", "pods": "250"}, "offerings": [%s]}`, f.Name, n, n, f.GiBPerCPU*n, strings.Join(offers, ",")))
		}
	}
	return catalog.ParseKWOK([]byte("[" + strings.Join(entries, ",") + "]"))
}

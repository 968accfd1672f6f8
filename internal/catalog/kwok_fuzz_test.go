package catalog_test

import (
	"math"
	"testing"

	"capstan.dev/capstan/internal/catalog"
)

// FuzzParseKWOK: any file given as a kwok menu (a SimNodeClass's instanceTypesFrom ConfigMap, a
// user's file) is refused with an error or read into types the solver can use: named, with no
// negative allocatable resource and every offering priced at a finite, non-negative price.
func FuzzParseKWOK(f *testing.F) {
	f.Add([]byte(twoTypes))
	f.Add([]byte(`[]`))
	f.Add([]byte(`[{"name":"x","offerings":[{"Price":-1}]}]`))
	f.Add([]byte(`[{"name":"c-1x-amd64-linux","architecture":"amd64","operatingSystems":["linux"],"resources":{"cpu":"50m","memory":"1Mi"},"offerings":[{"Price":1e308,"Available":true,"Requirements":[]}]}]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		its, err := catalog.ParseKWOK(b)
		if err != nil {
			return
		}
		for _, it := range its {
			if it.Name == "" {
				t.Fatalf("a type without a name from %q", b)
			}
			for n, q := range it.Allocatable() {
				if q.Sign() < 0 {
					t.Fatalf("%s: allocatable %s %s", it.Name, n, q.String())
				}
			}
			for _, o := range it.Offerings {
				if o.Price < 0 || math.IsNaN(o.Price) || math.IsInf(o.Price, 0) {
					t.Fatalf("%s: offering in %s (%s) priced %v", it.Name, o.Zone, o.CapacityType, o.Price)
				}
			}
		}
	})
}

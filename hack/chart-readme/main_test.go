package main

import (
	"reflect"
	"testing"
)

// Keys are listed in the file's order with their defaults and `# --` descriptions; a described
// mapping with no described key under it is one value, an undescribed one is walked.
func TestDocumentListsKeys(t *testing.T) {
	rows, err := document([]byte(`# -- Replicas; one leads.
replicas: 2
# -- The pods' affinity.
affinity:
  nodeAffinity: {x: 1}
settings:
  # -- The cluster's name,
  # required.
  clusterName: ""
  featureGates:
    # -- Spot to spot.
    spotToSpot: false
tolerations:
  - {key: a, operator: Exists}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []row{
		{"replicas", "`2`", "Replicas; one leads."},
		{"affinity", "`{nodeAffinity: {x: 1}}`", "The pods' affinity."},
		{"settings.clusterName", "`\"\"`", "The cluster's name, required."},
		{"settings.featureGates.spotToSpot", "`false`", "Spot to spot."},
		{"tolerations", "`[{key: a, operator: Exists}]`", ""},
	}
	if !reflect.DeepEqual(rows, want) {
		t.Errorf("rows\n%q\nwant\n%q", rows, want)
	}
}

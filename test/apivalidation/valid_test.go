package apivalidation

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

var validCases = []struct {
	name  string
	base  string
	patch string
}{
	{"nodepool minimal", baseNodePool, "spec: {template: {spec: {requirements: null}}}"},
	{"nodepool expireAfter Never", baseNodePool, "spec: {template: {spec: {expireAfter: Never}}}"},
	{"nodepool compound durations", baseNodePool, "spec: {template: {spec: {expireAfter: 1h30m, terminationGracePeriod: 48h}}, disruption: {consolidateAfter: 90s}}"},
	{"nodepool longest durations", baseNodePool, "spec: {template: {spec: {expireAfter: 2562047h, terminationGracePeriod: 2562047h}}, disruption: {consolidateAfter: 2562047h}}"},
	{"ec2nodeclass fractional grace period", baseEC2NodeClass, "spec: {kubelet: {evictionSoft: {memory.available: 5%}, evictionSoftGracePeriod: {memory.available: 1.5m}}}"},
	{"nodepool limits with exponents", baseNodePool, "spec: {limits: {cpu: 1.5e3, memory: 2E+12, nodes: 1e2}}"},
	{"nodepool consolidateAfter Never", baseNodePool, "spec: {disruption: {consolidateAfter: Never, consolidationPolicy: WhenEmpty}}"},
	{"nodepool weight bounds", baseNodePool, "spec: {weight: 100}"},
	{"nodepool weight one", baseNodePool, "spec: {weight: 1}"},
	{"nodepool capacity type and nodepool-safe requirements", baseNodePool, requirement(`
		{key: karpenter.sh/capacity-type, operator: In, values: [spot, on-demand]},
		{key: node.kubernetes.io/instance-type, operator: NotIn, values: [m5.large]},
		{key: topology.kubernetes.io/zone, operator: In, values: [us-east-1a, us-east-1b]},
		{key: karpenter.k8s.aws/instance-family, operator: In, values: [c5, m5, r5], minValues: 3},
		{key: karpenter.k8s.aws/instance-cpu, operator: Gt, values: ["0"]},
		{key: karpenter.k8s.aws/instance-memory, operator: Lte, values: ["65536"]},
		{key: karpenter.k8s.aws/instance-generation, operator: Gte, values: ["5"]},
		{key: example.com/gpu, operator: DoesNotExist},
		{key: node-restriction.kubernetes.io/team, operator: Exists},
		{key: kops.k8s.io/instancegroup, operator: Exists}`)},
	{"nodepool minValues without values on Exists", baseNodePool, requirement(`{key: karpenter.k8s.aws/instance-family, operator: Exists, minValues: 5}`)},
	{"nodepool allowed labels", baseNodePool, "spec: {template: {metadata: {labels: {team: orders, example.com/tier: gold, node.kubernetes.io/pool: a, karpenter.sh/capacity-type: spot, topology.kubernetes.io/zone: us-east-1a}, annotations: {example.com/note: anything goes here}}}}"},
	{"nodepool taints", baseNodePool, "spec: {template: {spec: {taints: [{key: workload, value: orders, effect: NoSchedule}, {key: example.com/x, effect: NoExecute}], startupTaints: [{key: node.cilium.io/agent-not-ready, value: 'true', effect: NoExecute}]}}}"},
	{"nodepool budgets", baseNodePool, budgets(`{nodes: "0", schedule: "@daily", duration: 10m}, {nodes: "100%", reasons: [Empty, Drifted]}, {nodes: "5", schedule: "0 9 * * mon-fri", duration: 8h, reasons: [Underutilized]}, {nodes: "3", schedule: "30 22 * * *", duration: 1h30m}`)},
	{"nodepool limits", baseNodePool, `spec: {limits: {cpu: "1000", memory: 1000Gi, nvidia.com/gpu: "8", pods: "5000"}}`},
	{"nodeclaim with nodepool requirement", baseNodeClaim, "spec: {requirements: [{key: karpenter.sh/nodepool, operator: In, values: [default]}, {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large, m5.xlarge]}], resources: {requests: {cpu: 1500m, memory: 3Gi, pods: '7'}}, terminationGracePeriod: 30m}"},
	{"ec2nodeclass instance profile with named ami", baseEC2NodeClass, "spec: {role: null, instanceProfile: KarpenterNodeProfile, amiFamily: AL2023, amiSelectorTerms: [{name: 'my-ami-*', owner: self}, {tags: {team: platform}}]}"},
	{"ec2nodeclass subnets and groups by every field", baseEC2NodeClass, "spec: {subnetSelectorTerms: [{id: subnet-0123456789abcdef0}, {tags: {Name: '*private*'}}], securityGroupSelectorTerms: [{id: sg-0123456789abcdef0}, {name: eks-nodes}, {tags: {team: a}}]}"},
	{"ec2nodeclass bottlerocket pinned alias", baseEC2NodeClass, "spec: {amiSelectorTerms: [{alias: bottlerocket@v1.20.0}]}"},
	{"ec2nodeclass full settings", baseEC2NodeClass, `spec:
  userData: "#!/bin/bash\necho hello"
  detailedMonitoring: true
  associatePublicIPAddress: false
  instanceStorePolicy: RAID0
  tags: {Team: commerce}
  metadataOptions: {httpEndpoint: enabled, httpProtocolIPv6: enabled, httpPutResponseHopLimit: 2, httpTokens: optional}
  blockDeviceMappings:
    - {deviceName: /dev/xvda, rootVolume: true, ebs: {volumeSize: 100Gi, volumeType: gp3, iops: 3000, throughput: 125, encrypted: true, deleteOnTermination: true}}
    - {deviceName: /dev/xvdb, ebs: {snapshotID: snap-0123456789abcdef0}}
  kubelet:
    maxPods: 110
    podsPerCore: 10
    systemReserved: {cpu: 100m, memory: 100Mi, ephemeral-storage: 1Gi}
    kubeReserved: {cpu: 200m, memory: 500Mi}
    evictionHard: {memory.available: 5%, nodefs.available: 10%}
    evictionSoft: {memory.available: 500Mi}
    evictionSoftGracePeriod: {memory.available: 1m}
    evictionMaxPodGracePeriod: 60
    imageGCHighThresholdPercent: 85
    imageGCLowThresholdPercent: 80
    cpuCFSQuota: true
    clusterDNS: [10.0.0.10]`},
	{"simnodeclass full settings", baseSimNodeClass, `spec:
  zones: [us-sim-1a, us-sim-1b]
  catalog: Full
  instanceTypes: [m5.large, c5.xlarge]
  spotPrice: {minPercent: 20, maxPercent: 20}
  priceOverrides: [{instanceType: m5.large, zone: us-sim-1a, capacityType: spot, price: "0.0312"}]
  kubelet: {maxPods: 110, podsPerCore: 10}
  launchDelay: 500ms
  registrationDelay: 2s
  failures:
    insufficientCapacity: [{instanceType: m5.large, zone: us-sim-1a}]
    launchErrors: [{zone: us-sim-1b, capacityType: spot}]
    neverRegister: [{instanceType: c5.xlarge}]
  capacityReservations:
  - {id: cr-0a1, instanceType: m5.large, zone: us-sim-1a, count: 3}
  - {id: cr-0b2, instanceType: p5.48xlarge, zone: us-sim-1b, count: 1, reservationType: capacity-block, endTime: "2026-12-24T00:00:00Z"}`},
	{"nodepool pinned to a capacity reservation", baseNodePool, requirement(`{key: karpenter.k8s.aws/capacity-reservation-id, operator: In, values: [cr-0a1]}`)},
	{"capacitybuffer over a template", baseCapacityBuffer, ""},
	{"capacitybuffer template with limits only", baseCapacityBuffer, "spec: {replicas: null, limits: {cpu: 4, memory: 8Gi}}"},
	{"capacitybuffer over a workload", baseCapacityBuffer, "spec: {podTemplateRef: null, replicas: null, scalableRef: {apiGroup: apps, kind: Deployment, name: web}, percentage: 20}"},
}

func TestValidEdgeCasesAreAccepted(t *testing.T) {
	for _, tc := range validCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			obj := object(t, tc.base, tc.patch, uniqueName(t))
			if err := env.Client.Create(t.Context(), obj, client.DryRunAll); err != nil {
				t.Fatalf("rejected: %v", err)
			}
		})
	}
}

func TestDefaultsAreApplied(t *testing.T) {
	cases := []struct {
		name string
		base string
		// want maps a field path (dot-separated) to its defaulted value.
		want map[string]any
	}{
		{"nodepool", baseNodePool, map[string]any{
			"spec.template.spec.expireAfter":      "720h",
			"spec.disruption.consolidateAfter":    "0s",
			"spec.disruption.consolidationPolicy": "WhenEmptyOrUnderutilized",
			"spec.disruption.budgets":             []any{map[string]any{"nodes": "10%"}},
		}},
		{"nodeclaim", baseNodeClaim, map[string]any{
			"spec.expireAfter": "720h",
		}},
		{"ec2nodeclass", baseEC2NodeClass, map[string]any{
			"spec.metadataOptions": map[string]any{
				"httpEndpoint": "enabled", "httpProtocolIPv6": "disabled",
				"httpPutResponseHopLimit": int64(1), "httpTokens": "required",
			},
		}},
		{"simnodeclass", baseSimNodeClass, map[string]any{
			"spec.zones":             []any{"zone-a", "zone-b", "zone-c"},
			"spec.catalog":           "Default",
			"spec.spotPrice":         map[string]any{"minPercent": int64(30), "maxPercent": int64(45)},
			"spec.launchDelay":       "1s",
			"spec.registrationDelay": "2s",
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			obj := object(t, tc.base, "", uniqueName(t))
			if err := env.Client.Create(t.Context(), obj, client.DryRunAll); err != nil {
				t.Fatalf("rejected: %v", err)
			}
			for path, want := range tc.want {
				got, found, err := unstructured.NestedFieldNoCopy(obj.Object, splitPath(path)...)
				if err != nil || !found {
					t.Errorf("%s: not set (err %v)", path, err)
					continue
				}
				if !equalJSON(got, want) {
					t.Errorf("%s = %#v, want %#v", path, got, want)
				}
			}
		})
	}
}

package apivalidation

import (
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

type invalidCase struct {
	name  string
	base  string
	patch string
	// want are substrings of the API server's message: the field path and what is wrong.
	want []string
}

func hundredAndOneRequirements() string {
	var sb strings.Builder
	sb.WriteString("spec: {template: {spec: {requirements: [")
	for i := range 101 {
		if i > 0 {
			sb.WriteString(", ")
		}
		fmt.Fprintf(&sb, "{key: example.com/k%d, operator: Exists}", i)
	}
	sb.WriteString("]}}}")
	return sb.String()
}

func requirement(r string) string {
	return "spec: {template: {spec: {requirements: [" + r + "]}}}"
}

func budgets(b string) string {
	return "spec: {disruption: {budgets: [" + b + "]}}"
}

var invalidCases = []invalidCase{
	// NodePool: weight and limits.
	{"nodepool weight zero", baseNodePool, "spec: {weight: 0}", []string{"spec.weight", "greater than or equal to 1"}},
	{"nodepool weight above 100", baseNodePool, "spec: {weight: 101}", []string{"spec.weight", "less than or equal to 100"}},
	{"nodepool limits not a quantity", baseNodePool, "spec: {limits: {cpu: lots}}", []string{"spec.limits.cpu", `Invalid value: "lots"`, "should match"}},
	// Kubernetes' own quantity pattern admits these; no Go client can read the first, and reading
	// the second takes minutes (hack/crd-patterns.sh narrows the pattern).
	{"nodepool limit with a fractional exponent", baseNodePool, "spec: {limits: {cpu: 1e1.5}}", []string{"spec.limits.cpu", "should match"}},
	{"nodepool limit with a huge exponent", baseNodePool, "spec: {limits: {memory: 1e20000000000}}", []string{"spec.limits.memory", "should match"}},
	{"nodeoverlay capacity with a huge exponent", baseNodeOverlay, "spec: {capacity: {example.com/gpu: 1e71000100}}", []string{"spec.capacity", "should match"}},
	// NodePool: requirements.
	{"requirement unknown operator", baseNodePool, requirement("{key: kubernetes.io/arch, operator: Equals, values: [amd64]}"),
		[]string{"spec.template.spec.requirements[0].operator", `Unsupported value: "Equals"`}},
	{"requirement In without values", baseNodePool, requirement("{key: kubernetes.io/arch, operator: In}"),
		[]string{"spec.template.spec.requirements[0]", "requirements with operator 'In' must have a value defined"}},
	{"requirement In with empty values", baseNodePool, requirement("{key: kubernetes.io/arch, operator: In, values: []}"),
		[]string{"spec.template.spec.requirements[0]", "requirements with operator 'In' must have a value defined"}},
	{"requirement Gt with two values", baseNodePool, requirement(`{key: karpenter.k8s.aws/instance-cpu, operator: Gt, values: ["1", "2"]}`),
		[]string{"spec.template.spec.requirements[0]", "must have a single non-negative integer value"}},
	{"requirement Gt not an integer", baseNodePool, requirement(`{key: karpenter.k8s.aws/instance-cpu, operator: Gt, values: ["four"]}`),
		[]string{"spec.template.spec.requirements[0]", "must have a single non-negative integer value"}},
	{"requirement Lt negative", baseNodePool, requirement(`{key: karpenter.k8s.aws/instance-cpu, operator: Lt, values: ["-1"]}`),
		[]string{"spec.template.spec.requirements[0]", "must have a single non-negative integer value"}},
	{"requirement Gte without value", baseNodePool, requirement(`{key: karpenter.k8s.aws/instance-cpu, operator: Gte}`),
		[]string{"spec.template.spec.requirements[0]", "must have a single non-negative integer value"}},
	{"requirement Lte decimal", baseNodePool, requirement(`{key: karpenter.k8s.aws/instance-memory, operator: Lte, values: ["1.5"]}`),
		[]string{"spec.template.spec.requirements[0]", "must have a single non-negative integer value"}},
	{"requirement Exists with values", baseNodePool, requirement(`{key: example.com/gpu, operator: Exists, values: ["x"]}`),
		[]string{"spec.template.spec.requirements[0]", "must not have values"}},
	{"requirement minValues above values", baseNodePool, requirement(`{key: karpenter.k8s.aws/instance-family, operator: In, values: [c5, m5], minValues: 3}`),
		[]string{"spec.template.spec.requirements[0]", "'minValues' must have at least that many values"}},
	{"requirement minValues zero", baseNodePool, requirement(`{key: karpenter.k8s.aws/instance-family, operator: Exists, minValues: 0}`),
		[]string{"spec.template.spec.requirements[0].minValues", "greater than or equal to 1"}},
	{"requirement minValues above 50", baseNodePool, requirement(`{key: karpenter.k8s.aws/instance-family, operator: Exists, minValues: 51}`),
		[]string{"spec.template.spec.requirements[0].minValues", "less than or equal to 50"}},
	{"requirement on hostname", baseNodePool, requirement(`{key: kubernetes.io/hostname, operator: In, values: [a]}`),
		[]string{"spec.template.spec.requirements[0].key", `label "kubernetes.io/hostname" is restricted`}},
	{"requirement on nodepool label in a nodepool", baseNodePool, requirement(`{key: karpenter.sh/nodepool, operator: In, values: [a]}`),
		[]string{"spec.template.spec.requirements", `label "karpenter.sh/nodepool" is restricted`}},
	{"requirement in karpenter.sh domain", baseNodePool, requirement(`{key: karpenter.sh/custom, operator: Exists}`),
		[]string{"spec.template.spec.requirements[0].key", `label domain "karpenter.sh" is restricted`}},
	{"requirement in kubernetes.io domain", baseNodePool, requirement(`{key: team.kubernetes.io/owner, operator: Exists}`),
		[]string{"spec.template.spec.requirements[0].key", `label domain "kubernetes.io" is restricted`}},
	{"requirement in k8s.io domain", baseNodePool, requirement(`{key: example.k8s.io/x, operator: Exists}`),
		[]string{"spec.template.spec.requirements[0].key", `label domain "k8s.io" is restricted`}},
	{"requirement in karpenter.k8s.aws domain", baseNodePool, requirement(`{key: karpenter.k8s.aws/ec2nodeclass, operator: Exists}`),
		[]string{"spec.template.spec.requirements[0].key", `label domain "karpenter.k8s.aws" is restricted`}},
	{"requirement key not a label key", baseNodePool, requirement(`{key: "has space", operator: Exists}`),
		[]string{"spec.template.spec.requirements[0].key", "should match"}},
	{"requirement value not a label value", baseNodePool, requirement(`{key: example.com/team, operator: In, values: ["a b"]}`),
		[]string{"spec.template.spec.requirements[0].values[0]", "should match"}},
	{"more than 100 requirements", baseNodePool, hundredAndOneRequirements(),
		[]string{"spec.template.spec.requirements", "must have at most 100 items"}},
	// NodePool: template labels and taints.
	{"label karpenter.sh/nodepool", baseNodePool, "spec: {template: {metadata: {labels: {karpenter.sh/nodepool: x}}}}",
		[]string{"spec.template.metadata.labels", `label "karpenter.sh/nodepool" is restricted`}},
	{"label kubernetes.io/hostname", baseNodePool, "spec: {template: {metadata: {labels: {kubernetes.io/hostname: x}}}}",
		[]string{"spec.template.metadata.labels", `label "kubernetes.io/hostname" is restricted`}},
	{"label in karpenter.sh domain", baseNodePool, "spec: {template: {metadata: {labels: {karpenter.sh/team: x}}}}",
		[]string{"spec.template.metadata.labels", `label domain "karpenter.sh" is restricted`}},
	{"label in kubernetes.io domain", baseNodePool, "spec: {template: {metadata: {labels: {kubernetes.io/team: x}}}}",
		[]string{"spec.template.metadata.labels", `label domain "kubernetes.io" is restricted`}},
	{"label in karpenter.k8s.aws domain", baseNodePool, "spec: {template: {metadata: {labels: {karpenter.k8s.aws/instance-family: c5}}}}",
		[]string{"spec.template.metadata.labels", `label domain "karpenter.k8s.aws" is restricted`}},
	{"label value too long", baseNodePool, "spec: {template: {metadata: {labels: {team: " + strings.Repeat("a", 64) + "}}}}",
		[]string{"spec.template.metadata.labels.team", "may not be more than 63"}},
	{"taint effect unknown", baseNodePool, "spec: {template: {spec: {taints: [{key: workload, value: orders, effect: Sometimes}]}}}",
		[]string{"spec.template.spec.taints", "taint effect must be one of"}},
	{"startup taint without key", baseNodePool, `spec: {template: {spec: {startupTaints: [{key: "", effect: NoSchedule}]}}}`,
		[]string{"spec.template.spec.startupTaints", "taint key may not be empty"}},
	// Values the kubelet registers its node with, and that reach a machine's boot script: a quote,
	// a command substitution, a backquote or a newline is refused, with the field named.
	{"taint value with a quote", baseNodePool, `spec: {template: {spec: {taints: [{key: workload, value: "x';touch /tmp/p;'", effect: NoSchedule}]}}}`,
		[]string{"spec.template.spec.taints[0].value", "should match"}},
	{"taint value with a command substitution", baseNodePool, `spec: {template: {spec: {taints: [{key: workload, value: "$(id)", effect: NoSchedule}]}}}`,
		[]string{"spec.template.spec.taints[0].value", "should match"}},
	{"startup taint value with a backquote", baseNodePool, "spec: {template: {spec: {startupTaints: [{key: workload, value: \"`id`\", effect: NoSchedule}]}}}",
		[]string{"spec.template.spec.startupTaints[0].value", "should match"}},
	{"taint value with a newline", baseNodePool, `spec: {template: {spec: {taints: [{key: workload, value: "a\nb", effect: NoSchedule}]}}}`,
		[]string{"spec.template.spec.taints[0].value", "should match"}},
	{"taint value too long", baseNodePool, "spec: {template: {spec: {taints: [{key: workload, value: " + strings.Repeat("a", 64) + ", effect: NoSchedule}]}}}",
		[]string{"spec.template.spec.taints[0].value", "may not be more than 63"}},
	{"taint key with a quote", baseNodePool, `spec: {template: {spec: {taints: [{key: "a'b", effect: NoSchedule}]}}}`,
		[]string{"spec.template.spec.taints[0].key", "should match"}},
	{"taint key with an upper-case prefix", baseNodePool, `spec: {template: {spec: {taints: [{key: Example.com/gpu, effect: NoSchedule}]}}}`,
		[]string{"spec.template.spec.taints[0].key", "should match"}},
	{"label value with a quote", baseNodePool, `spec: {template: {metadata: {labels: {team: "x';touch /tmp/p;'"}}}}`,
		[]string{"spec.template.metadata.labels.team", "should match"}},
	{"label value with a command substitution", baseNodePool, `spec: {template: {metadata: {labels: {team: "$(id)"}}}}`,
		[]string{"spec.template.metadata.labels.team", "should match"}},
	{"label value with a backquote", baseNodePool, "spec: {template: {metadata: {labels: {team: \"`id`\"}}}}",
		[]string{"spec.template.metadata.labels.team", "should match"}},
	{"label value with a newline", baseNodePool, `spec: {template: {metadata: {labels: {team: "a\nb"}}}}`,
		[]string{"spec.template.metadata.labels.team", "should match"}},
	{"nodeclaim taint value with a quote", baseNodeClaim, `spec: {taints: [{key: workload, value: "x';touch /tmp/p;'", effect: NoSchedule}]}`,
		[]string{"spec.taints[0].value", "should match"}},
	{"nodeclaim startup taint value with a command substitution", baseNodeClaim, `spec: {startupTaints: [{key: workload, value: "$(id)", effect: NoExecute}]}`,
		[]string{"spec.startupTaints[0].value", "should match"}},
	{"nodeclaim taint key with a space", baseNodeClaim, `spec: {taints: [{key: "a b", effect: NoSchedule}]}`,
		[]string{"spec.taints[0].key", "should match"}},
	// NodePool: nodeClassRef and durations.
	{"nodeClassRef missing", baseNodePool, "spec: {template: {spec: {nodeClassRef: null}}}",
		[]string{"spec.template.spec.nodeClassRef", "Required value"}},
	{"nodeClassRef empty name", baseNodePool, `spec: {template: {spec: {nodeClassRef: {name: ""}}}}`,
		[]string{"spec.template.spec.nodeClassRef.name", "name may not be empty"}},
	{"nodeClassRef empty group", baseNodePool, `spec: {template: {spec: {nodeClassRef: {group: ""}}}}`,
		[]string{"spec.template.spec.nodeClassRef.group", "group may not be empty"}},
	{"nodeClassRef empty kind", baseNodePool, `spec: {template: {spec: {nodeClassRef: {kind: ""}}}}`,
		[]string{"spec.template.spec.nodeClassRef.kind", "kind may not be empty"}},
	{"expireAfter in days", baseNodePool, "spec: {template: {spec: {expireAfter: 30d}}}",
		[]string{"spec.template.spec.expireAfter", "should match"}},
	{"expireAfter lower-case never", baseNodePool, "spec: {template: {spec: {expireAfter: never}}}",
		[]string{"spec.template.spec.expireAfter", "should match"}},
	{"terminationGracePeriod Never", baseNodePool, "spec: {template: {spec: {terminationGracePeriod: Never}}}",
		[]string{"spec.template.spec.terminationGracePeriod", "should match"}},
	{"consolidateAfter in days", baseNodePool, "spec: {disruption: {consolidateAfter: 1d}}",
		[]string{"spec.disruption.consolidateAfter", "should match"}},
	// Durations the patterns admit but no Go program can read (past 2562047h, about 292 years):
	// accepted, they would stop every client that decodes the object, Capstan's caches among them.
	{"consolidateAfter past Go's longest duration", baseNodePool, "spec: {disruption: {consolidateAfter: 99999999999s}}",
		[]string{"spec.disruption.consolidateAfter", "at most 2562047h"}},
	{"expireAfter just past 2562047h", baseNodePool, "spec: {template: {spec: {expireAfter: 2562047h1m}}}",
		[]string{"spec.template.spec.expireAfter", "at most 2562047h"}},
	{"terminationGracePeriod past Go's longest duration", baseNodePool, "spec: {template: {spec: {terminationGracePeriod: 3000000h}}}",
		[]string{"spec.template.spec.terminationGracePeriod", "at most 2562047h"}},
	{"budget duration past Go's longest duration", baseNodePool, budgets(`{nodes: "0", schedule: "@daily", duration: 9999999999h}`),
		[]string{"spec.disruption.budgets[0].duration", "at most 2562047h"}},
	{"nodeclaim terminationGracePeriod past Go's longest duration", baseNodeClaim, "spec: {terminationGracePeriod: 1h99999999999s}",
		[]string{"spec.terminationGracePeriod", "at most 2562047h"}},
	{"simnodeclass launch delay past Go's longest duration", baseSimNodeClass, "spec: {launchDelay: 9999999999999ms9999999h}",
		[]string{"spec.launchDelay", "at most 2562047h"}},
	{"consolidationPolicy of v1beta1", baseNodePool, "spec: {disruption: {consolidationPolicy: WhenUnderutilized}}",
		[]string{"spec.disruption.consolidationPolicy", `Unsupported value: "WhenUnderutilized"`}},
	// NodePool: budgets.
	{"budget nodes above 100%", baseNodePool, budgets(`{nodes: "110%"}`), []string{"spec.disruption.budgets[0].nodes", "should match"}},
	{"budget nodes word", baseNodePool, budgets(`{nodes: "all"}`), []string{"spec.disruption.budgets[0].nodes", "should match"}},
	{"budget schedule without duration", baseNodePool, budgets(`{nodes: "0", schedule: "@daily"}`),
		[]string{"spec.disruption.budgets[0]", "'schedule' must be set with 'duration'"}},
	{"budget duration without schedule", baseNodePool, budgets(`{nodes: "0", duration: 1h}`),
		[]string{"spec.disruption.budgets[0]", "'schedule' must be set with 'duration'"}},
	{"budget duration in seconds", baseNodePool, budgets(`{nodes: "0", schedule: "@daily", duration: 30s}`),
		[]string{"spec.disruption.budgets[0].duration", "should match"}},
	{"budget schedule not cron", baseNodePool, budgets(`{nodes: "0", schedule: "every day", duration: 1h}`),
		[]string{"spec.disruption.budgets[0].schedule", "should match"}},
	{"budget reason unknown", baseNodePool, budgets(`{nodes: "1", reasons: [Expired]}`),
		[]string{"spec.disruption.budgets[0].reasons[0]", `Unsupported value: "Expired"`}},
	// NodeClaim.
	{"nodeclaim without requirements", baseNodeClaim, "spec: {requirements: null}", []string{"spec.requirements", "Required value"}},
	{"nodeclaim without nodeClassRef", baseNodeClaim, "spec: {nodeClassRef: null}", []string{"spec.nodeClassRef", "Required value"}},
	{"nodeclaim requirement on hostname", baseNodeClaim, "spec: {requirements: [{key: kubernetes.io/hostname, operator: Exists}]}",
		[]string{"spec.requirements[0].key", `label "kubernetes.io/hostname" is restricted`}},
	{"nodeclaim In without values", baseNodeClaim, "spec: {requirements: [{key: kubernetes.io/arch, operator: In}]}",
		[]string{"spec.requirements[0]", "requirements with operator 'In' must have a value defined"}},
	{"nodeclaim request not a quantity", baseNodeClaim, "spec: {resources: {requests: {cpu: one}}}",
		[]string{"spec.resources.requests.cpu", `Invalid value: "one"`, "should match"}},
	{"nodeclaim expireAfter in weeks", baseNodeClaim, "spec: {expireAfter: 4w}", []string{"spec.expireAfter", "should match"}},
	// EC2NodeClass.
	{"ec2nodeclass role and instanceProfile", baseEC2NodeClass, "spec: {instanceProfile: KarpenterNodeProfile}",
		[]string{"spec", "must specify exactly one of ['role', 'instanceProfile']"}},
	{"ec2nodeclass neither role nor instanceProfile", baseEC2NodeClass, "spec: {role: null}",
		[]string{"spec", "must specify exactly one of ['role', 'instanceProfile']"}},
	{"ec2nodeclass no amiSelectorTerms", baseEC2NodeClass, "spec: {amiSelectorTerms: []}",
		[]string{"spec.amiSelectorTerms", "should have at least 1 items"}},
	{"ec2nodeclass empty ami term", baseEC2NodeClass, "spec: {amiSelectorTerms: [{}]}",
		[]string{"spec.amiSelectorTerms[0]", "expected at least one, got none, ['tags', 'id', 'name', 'alias', 'ssmParameter']"}},
	{"ec2nodeclass ami id placeholder", baseEC2NodeClass, "spec: {amiFamily: AL2023, amiSelectorTerms: [{id: ami-REPLACE_VERIFIED_AMI}]}",
		[]string{"spec.amiSelectorTerms[0].id", `"ami-REPLACE_VERIFIED_AMI"`, "should match"}},
	{"ec2nodeclass ami id with tags", baseEC2NodeClass, "spec: {amiFamily: AL2023, amiSelectorTerms: [{id: ami-0123456789abcdef0, tags: {team: a}}]}",
		[]string{"spec.amiSelectorTerms[0]", "'id' is mutually exclusive"}},
	{"ec2nodeclass alias with another term", baseEC2NodeClass, "spec: {amiSelectorTerms: [{alias: al2023@latest}, {id: ami-0123456789abcdef0}]}",
		[]string{"spec.amiSelectorTerms", "'alias' is mutually exclusive"}},
	{"ec2nodeclass alias family unknown", baseEC2NodeClass, "spec: {amiSelectorTerms: [{alias: ubuntu@latest}]}",
		[]string{"spec.amiSelectorTerms[0].alias", "family is not supported"}},
	{"ec2nodeclass ami id without amiFamily", baseEC2NodeClass, "spec: {amiSelectorTerms: [{id: ami-0123456789abcdef0}]}",
		[]string{"spec", "amiFamily is required if amiSelectorTerms does not specify an alias"}},
	{"ec2nodeclass windows2025 pinned version", baseEC2NodeClass, "spec: {amiSelectorTerms: [{alias: windows2025@v20250101}]}",
		[]string{"spec.amiSelectorTerms[0].alias", "windows families may only specify version 'latest'"}},
	{"ec2nodeclass amiFamily differs from alias", baseEC2NodeClass, "spec: {amiFamily: Bottlerocket}",
		[]string{"spec", "amiFamily must be 'Custom' or the family of the alias"}},
	{"ec2nodeclass network interfaces without a primary", baseEC2NodeClass, "spec: {networkInterfaces: [{networkCardIndex: 0, deviceIndex: 1, interfaceType: interface}]}",
		[]string{"spec.networkInterfaces", "must include a primary interface"}},
	{"ec2nodeclass two efa interfaces on one card", baseEC2NodeClass, "spec: {networkInterfaces: [{networkCardIndex: 0, deviceIndex: 0, interfaceType: interface}, {networkCardIndex: 0, deviceIndex: 1, interfaceType: efa-only}, {networkCardIndex: 0, deviceIndex: 2, interfaceType: efa-only}]}",
		[]string{"spec.networkInterfaces", "at most one efa device per network card"}},
	{"ec2nodeclass capacity reservation id with tags", baseEC2NodeClass, "spec: {capacityReservationSelectorTerms: [{id: cr-0123456789abcdef0, tags: {a: b}}]}",
		[]string{"spec.capacityReservationSelectorTerms[0]", "'id' is mutually exclusive"}},
	{"ec2nodeclass empty connection tracking", baseEC2NodeClass, "spec: {connectionTracking: {}}",
		[]string{"spec.connectionTracking", "at least one of tcpEstablishedTimeout"}},
	{"ec2nodeclass placement group by name and id", baseEC2NodeClass, "spec: {placementGroupSelector: {name: a, id: pg-0123}}",
		[]string{"spec.placementGroupSelector", "'name' and 'id' are mutually exclusive"}},
	{"ec2nodeclass volume initialization rate too high", baseEC2NodeClass, "spec: {blockDeviceMappings: [{deviceName: /dev/xvda, ebs: {snapshotID: snap-0123, volumeInitializationRate: 301}}]}",
		[]string{"spec.blockDeviceMappings[0].ebs.volumeInitializationRate", "less than or equal to 300"}},
	{"nodeoverlay price and adjustment", baseNodeOverlay, `spec: {price: "0.5", priceAdjustment: "+10%"}`,
		[]string{"spec", "cannot set both 'price' and 'priceAdjustment'"}},
	{"nodeoverlay cpu capacity", baseNodeOverlay, `spec: {capacity: {cpu: "4"}}`,
		[]string{"spec.capacity", "invalid resource restricted"}},
	{"nodeoverlay bad adjustment", baseNodeOverlay, `spec: {priceAdjustment: "ten percent"}`,
		[]string{"spec.priceAdjustment", "should match"}},
	{"nodeoverlay weight zero", baseNodeOverlay, `spec: {weight: 0}`,
		[]string{"spec.weight", "greater than or equal to 1"}},
	{"nodepool static with a cpu limit", baseNodePool, `spec: {replicas: 2, limits: {cpu: "10"}}`,
		[]string{"spec", "only 'limits.nodes' is supported on static NodePools"}},
	{"nodepool static with a weight", baseNodePool, "spec: {replicas: 2, weight: 10}",
		[]string{"spec", "'weight' is not supported on static NodePools"}},
	{"nodepool negative replicas", baseNodePool, "spec: {replicas: -1}",
		[]string{"spec.replicas", "greater than or equal to 0"}},
	{"ec2nodeclass amiFamily unknown", baseEC2NodeClass, "spec: {amiFamily: Ubuntu}",
		[]string{"spec.amiFamily", `Unsupported value: "Ubuntu"`}},
	{"ec2nodeclass empty subnet term", baseEC2NodeClass, "spec: {subnetSelectorTerms: [{}]}",
		[]string{"spec.subnetSelectorTerms[0]", "expected at least one, got none, ['tags', 'id']"}},
	{"ec2nodeclass subnet id placeholder", baseEC2NodeClass, "spec: {subnetSelectorTerms: [{id: subnet-REPLACE}]}",
		[]string{"spec.subnetSelectorTerms[0].id", "should match"}},
	{"ec2nodeclass subnet id with tags", baseEC2NodeClass, "spec: {subnetSelectorTerms: [{id: subnet-0123456789abcdef0, tags: {a: b}}]}",
		[]string{"spec.subnetSelectorTerms[0]", "'id' is mutually exclusive"}},
	{"ec2nodeclass no security group terms", baseEC2NodeClass, "spec: {securityGroupSelectorTerms: null}",
		[]string{"spec.securityGroupSelectorTerms", "Required value"}},
	{"ec2nodeclass security group id placeholder", baseEC2NodeClass, "spec: {securityGroupSelectorTerms: [{id: sg-REPLACE_NODE_SECURITY_GROUP}]}",
		[]string{"spec.securityGroupSelectorTerms[0].id", "should match"}},
	{"ec2nodeclass security group name with id", baseEC2NodeClass, "spec: {securityGroupSelectorTerms: [{id: sg-0123456789abcdef0, name: nodes}]}",
		[]string{"spec.securityGroupSelectorTerms[0]", "'id' is mutually exclusive"}},
	{"ec2nodeclass security group name with tags", baseEC2NodeClass, "spec: {securityGroupSelectorTerms: [{name: nodes, tags: {a: b}}]}",
		[]string{"spec.securityGroupSelectorTerms[0]", "'name' is mutually exclusive"}},
	{"ec2nodeclass selector tag empty value", baseEC2NodeClass, `spec: {subnetSelectorTerms: [{tags: {karpenter.sh/discovery: ""}}]}`,
		[]string{"spec.subnetSelectorTerms[0].tags", "empty tag keys or values aren't supported"}},
	{"ec2nodeclass httpTokens unknown", baseEC2NodeClass, "spec: {metadataOptions: {httpTokens: maybe}}",
		[]string{"spec.metadataOptions.httpTokens", `Unsupported value: "maybe"`}},
	{"ec2nodeclass httpEndpoint unknown", baseEC2NodeClass, "spec: {metadataOptions: {httpEndpoint: on}}",
		[]string{"spec.metadataOptions.httpEndpoint", "Unsupported value"}},
	{"ec2nodeclass hop limit zero", baseEC2NodeClass, "spec: {metadataOptions: {httpPutResponseHopLimit: 0}}",
		[]string{"spec.metadataOptions.httpPutResponseHopLimit", "greater than or equal to 1"}},
	{"ec2nodeclass hop limit 65", baseEC2NodeClass, "spec: {metadataOptions: {httpPutResponseHopLimit: 65}}",
		[]string{"spec.metadataOptions.httpPutResponseHopLimit", "less than or equal to 64"}},
	{"ec2nodeclass restricted cluster tag", baseEC2NodeClass, "spec: {tags: {kubernetes.io/cluster/prod-east: owned}}",
		[]string{"spec.tags", "restricted tag matching kubernetes.io/cluster/"}},
	{"ec2nodeclass restricted nodepool tag", baseEC2NodeClass, "spec: {tags: {karpenter.sh/nodepool: x}}",
		[]string{"spec.tags", "restricted tag matching karpenter.sh/nodepool"}},
	{"ec2nodeclass two root volumes", baseEC2NodeClass, "spec: {blockDeviceMappings: [{deviceName: /dev/xvda, rootVolume: true, ebs: {volumeSize: 20Gi}}, {deviceName: /dev/xvdb, rootVolume: true, ebs: {volumeSize: 20Gi}}]}",
		[]string{"spec.blockDeviceMappings", "must have only one blockDeviceMappings with rootVolume"}},
	{"ec2nodeclass volume type unknown", baseEC2NodeClass, "spec: {blockDeviceMappings: [{deviceName: /dev/xvda, ebs: {volumeSize: 20Gi, volumeType: gp9}}]}",
		[]string{"spec.blockDeviceMappings[0].ebs.volumeType", `Unsupported value: "gp9"`}},
	{"ec2nodeclass volume size in bytes", baseEC2NodeClass, "spec: {blockDeviceMappings: [{deviceName: /dev/xvda, ebs: {volumeSize: 20000000}}]}",
		[]string{"spec.blockDeviceMappings[0].ebs.volumeSize", "must be of type string"}},
	{"ec2nodeclass volume size in megabytes", baseEC2NodeClass, "spec: {blockDeviceMappings: [{deviceName: /dev/xvda, ebs: {volumeSize: 500Mi}}]}",
		[]string{"spec.blockDeviceMappings[0].ebs.volumeSize", `Invalid value: "500Mi"`, "should match"}},
	{"ec2nodeclass kubelet reserved key", baseEC2NodeClass, "spec: {kubelet: {systemReserved: {gpu: '1'}}}",
		[]string{"spec.kubelet.systemReserved", "valid keys for systemReserved are"}},
	{"ec2nodeclass kubelet reserved negative", baseEC2NodeClass, "spec: {kubelet: {kubeReserved: {cpu: '-1'}}}",
		[]string{"spec.kubelet.kubeReserved.cpu", `Invalid value: "-1"`, "should match"}},
	{"ec2nodeclass image gc thresholds inverted", baseEC2NodeClass, "spec: {kubelet: {imageGCHighThresholdPercent: 50, imageGCLowThresholdPercent: 80}}",
		[]string{"spec.kubelet", "imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent"}},
	{"ec2nodeclass evictionSoftGracePeriod not a duration", baseEC2NodeClass, "spec: {kubelet: {evictionSoft: {memory.available: 5%}, evictionSoftGracePeriod: {memory.available: soon}}}",
		[]string{"spec.kubelet.evictionSoftGracePeriod", "at most 2562047h"}},
	{"ec2nodeclass evictionSoftGracePeriod past Go's longest duration", baseEC2NodeClass, "spec: {kubelet: {evictionSoft: {memory.available: 5%}, evictionSoftGracePeriod: {memory.available: 3000000h}}}",
		[]string{"spec.kubelet.evictionSoftGracePeriod", "at most 2562047h"}},
	{"ec2nodeclass evictionSoft without grace period", baseEC2NodeClass, "spec: {kubelet: {evictionSoft: {memory.available: 5%}}}",
		[]string{"spec.kubelet", "each evictionSoft key needs an evictionSoftGracePeriod"}},
	{"ec2nodeclass eviction signal unknown", baseEC2NodeClass, "spec: {kubelet: {evictionHard: {cpu.available: 5%}}}",
		[]string{"spec.kubelet.evictionHard", "valid keys for evictionHard are"}},
	{"ec2nodeclass maxPods negative", baseEC2NodeClass, "spec: {kubelet: {maxPods: -1}}",
		[]string{"spec.kubelet.maxPods", "greater than or equal to 0"}},
	// Karpenter's NodeClassCEL (alpha, off by default) takes CEL expressions evaluated per
	// instance type in these fields; Capstan has no such gate, and the expression is refused
	// with the field named rather than stored and ignored.
	{"ec2nodeclass maxPods as a CEL expression", baseEC2NodeClass, `spec: {kubelet: {maxPods: "((default_enis - 1) * (ips_per_eni - 1)) + 2"}}`,
		[]string{"spec.kubelet.maxPods", "must be of type integer"}},
	{"ec2nodeclass kubeReserved as a CEL expression", baseEC2NodeClass, `spec: {kubelet: {kubeReserved: {cpu: "max(60, vcpus * 30)"}}}`,
		[]string{"spec.kubelet.kubeReserved.cpu", "should match"}},
	// SimNodeClass.
	{"simnodeclass duplicate zones", baseSimNodeClass, "spec: {zones: [zone-a, zone-a]}", []string{"spec.zones", "zones must be unique"}},
	{"simnodeclass catalog unknown", baseSimNodeClass, "spec: {catalog: Huge}", []string{"spec.catalog", `Unsupported value: "Huge"`}},
	{"simnodeclass spot range inverted", baseSimNodeClass, "spec: {spotPrice: {minPercent: 50, maxPercent: 40}}",
		[]string{"spec.spotPrice", "minPercent must not exceed maxPercent"}},
	{"simnodeclass price not a number", baseSimNodeClass, "spec: {priceOverrides: [{instanceType: m5.large, price: cheap}]}",
		[]string{"spec.priceOverrides[0].price", "should match"}},
	{"simnodeclass capacity type unknown", baseSimNodeClass, "spec: {failures: {insufficientCapacity: [{capacityType: dedicated}]}}",
		[]string{"spec.failures.insufficientCapacity[0].capacityType", `Unsupported value: "dedicated"`}},
	{"simnodeclass capacity reservation ids repeated", baseSimNodeClass,
		"spec: {capacityReservations: [{id: cr-1, instanceType: m5.large, zone: zone-a, count: 1}, {id: cr-1, instanceType: m5.large, zone: zone-b, count: 1}]}",
		[]string{"spec.capacityReservations", "capacity reservation ids must be unique"}},
	{"simnodeclass capacity reservation empty", baseSimNodeClass, "spec: {capacityReservations: [{id: cr-1, instanceType: m5.large, zone: zone-a, count: 0}]}",
		[]string{"spec.capacityReservations[0].count", "should be greater than or equal to 1"}},
	{"simnodeclass launch delay in days", baseSimNodeClass, "spec: {launchDelay: 1d}", []string{"spec.launchDelay", "should match"}},
	// CapacityBuffer (SIG Autoscaling's rules).
	{"capacitybuffer template without a count", baseCapacityBuffer, "spec: {replicas: null}",
		[]string{"spec", "If podTemplateRef is set, replicas or limits must also be set"}},
	{"capacitybuffer template and workload", baseCapacityBuffer, "spec: {scalableRef: {apiGroup: apps, kind: Deployment, name: web}}",
		[]string{"spec", "either PodTemplateRef or ScalableRef, but not both"}},
	{"capacitybuffer negative replicas", baseCapacityBuffer, "spec: {replicas: -1}", []string{"spec.replicas", "greater than or equal to 0"}},
	{"capacitybuffer workload without a kind", baseCapacityBuffer, "spec: {podTemplateRef: null, scalableRef: {name: web}, percentage: 10}",
		[]string{"spec.scalableRef.kind", "Required value"}},
}

func TestInvalidManifestsAreRejected(t *testing.T) {
	if len(invalidCases) < 40 {
		t.Fatalf("the table has %d cases; keep at least 40", len(invalidCases))
	}
	for _, tc := range invalidCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			obj := object(t, tc.base, tc.patch, uniqueName(t))
			err := env.Client.Create(t.Context(), obj, client.DryRunAll)
			if err == nil {
				t.Fatalf("accepted; want rejection mentioning %q", tc.want)
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("got %v; want an Invalid error", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message %q does not contain %q", err.Error(), w)
				}
			}
		})
	}
}

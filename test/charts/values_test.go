// Package charts renders Capstan's Helm charts with bin/helm (built by hack/tools.sh) and checks
// what a values file written for Karpenter v1.15's chart gets: each key with the same meaning,
// refused with the reason, or — a key neither chart knows — refused by the schema.
package charts

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"capstan.dev/capstan/internal/testenv"
)

// karpenterDefaults has every key of Karpenter v1.15's chart values at its default there, but
// controller.image (Karpenter's own image, refused: TestKarpenterImageIsRefused).
const karpenterDefaults = `
nameOverride: ""
fullnameOverride: ""
additionalLabels: {}
additionalAnnotations: {}
imagePullPolicy: IfNotPresent
imagePullSecrets: []
service:
  annotations: {}
serviceAccount:
  create: true
  name: ""
  annotations: {}
additionalClusterRoleRules: []
serviceMonitor:
  enabled: false
  additionalLabels: {}
  relabelings: []
  metricRelabelings: []
  endpointConfig: {}
  sampleLimit: null
replicas: 2
revisionHistoryLimit: 10
strategy:
  rollingUpdate:
    maxUnavailable: 1
podLabels: {}
podAnnotations: {}
podDisruptionBudget:
  name: karpenter
  maxUnavailable: 1
podSecurityContext:
  fsGroup: 65532
  seccompProfile:
    type: RuntimeDefault
priorityClassName: system-cluster-critical
terminationGracePeriodSeconds:
hostNetwork: false
schedulerName: default-scheduler
dnsPolicy: ClusterFirst
dnsConfig: {}
initContainers: {}
nodeSelector:
  kubernetes.io/os: linux
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
        - matchExpressions:
            - key: karpenter.sh/nodepool
              operator: DoesNotExist
  podAntiAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      - topologyKey: "kubernetes.io/hostname"
topologySpreadConstraints:
  - maxSkew: 1
    topologyKey: topology.kubernetes.io/zone
    whenUnsatisfiable: DoNotSchedule
tolerations:
  - key: CriticalAddonsOnly
    operator: Exists
extraVolumes: []
controller:
  containerName: controller
  env: []
  envFrom: []
  securityContext:
    appArmorProfile: {}
    seLinuxOptions: {}
    seccompProfile: {}
  resources: {}
  extraVolumeMounts: []
  sidecarContainer: []
  sidecarVolumeMounts: []
  metrics:
    port: 8080
  healthProbe:
    port: 8081
logLevel: info
logOutputPaths:
  - stdout
logErrorOutputPaths:
  - stderr
settings:
  batchMaxDuration: 10s
  batchIdleDuration: 1s
  preferencePolicy: Respect
  minValuesPolicy: Strict
  clusterCABundle: ""
  clusterName: "orders"
  clusterEndpoint: ""
  isolatedVPC: false
  eksControlPlane: false
  vmMemoryOverheadPercent: 0.075
  interruptionQueue: ""
  enableZonalShift: false
  reservedENIs: "0"
  enableDRA: false
  ignoreDRARequests: null
  legacyNodeRepair: false
  disableClusterStateObservability: false
  disableDryRun: false
  amiRefreshInterval: 1m
  subnetRefreshInterval: 1m
  securityGroupRefreshInterval: 1m
  featureGates:
    nodeRepair: false
    nodeOverlay: false
    reservedCapacity: true
    spotToSpotConsolidation: false
    staticCapacity: false
    capacityBuffer: false
    terminateFirstDrift: false
    terminateFirstRepair: false
    podDeletionCostManagement: false
  awsFeatureGates:
    nodeClassCEL: false
    draNVIDIAGPU: null
    draEFA: null
    rebootForRepair: false
`

func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// render runs helm template on charts/capstan with the values files (contents) and --set
// arguments, and returns the output or the error text.
func render(t *testing.T, files []string, sets ...string) (string, error) {
	t.Helper()
	return renderWith(t, append([]string{testImage}, files...), sets...)
}

// testImage is a values file that names an image, which the chart requires and a Karpenter values
// file does not give; the files and sets after it override it.
const testImage = "controller: {image: {repository: registry.example/capstan/controller}}\n"

// renderWith is render without testImage.
func renderWith(t *testing.T, files []string, sets ...string) (string, error) {
	t.Helper()
	root := moduleRoot(t)
	args := []string{"template", "capstan", filepath.Join(root, "charts", "capstan"), "--namespace", "kube-system"}
	for i, f := range files {
		p := filepath.Join(t.TempDir(), "values"+string(rune('a'+i))+".yaml")
		if err := os.WriteFile(p, []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "-f", p)
	}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	out, err := exec.Command(filepath.Join(root, "bin", "helm"), args...).CombinedOutput()
	if err != nil {
		return "", &renderError{string(out)}
	}
	return string(out), nil
}

type renderError struct{ out string }

func (e *renderError) Error() string { return e.out }

// object decodes, into into, the first document of the rendered YAML whose kind is kind.
func object(t *testing.T, rendered, kind string, into any) {
	t.Helper()
	for _, doc := range strings.Split(rendered, "\n---\n") {
		if strings.Contains(doc, "\nkind: "+kind+"\n") {
			if err := yaml.Unmarshal([]byte(doc), into); err != nil {
				t.Fatalf("%s: %v", kind, err)
			}
			return
		}
	}
	t.Fatalf("no %s rendered", kind)
}

func env(c corev1.Container) map[string]string {
	m := map[string]string{}
	for _, e := range c.Env {
		m[e.Name] = e.Value
	}
	return m
}

// A values file with every key of Karpenter's chart at Karpenter's defaults installs, and each
// key means what it means there.
func TestKarpenterDefaultsRender(t *testing.T) {
	out, err := render(t, []string{karpenterDefaults})
	if err != nil {
		t.Fatalf("Karpenter v1.15's defaults do not render:\n%v", err)
	}
	var d appsv1.Deployment
	object(t, out, "Deployment", &d)
	spec := d.Spec.Template.Spec
	c := spec.Containers[0]
	if *d.Spec.RevisionHistoryLimit != 10 || d.Spec.Strategy.RollingUpdate.MaxUnavailable.IntValue() != 1 ||
		spec.SchedulerName != "default-scheduler" || spec.HostNetwork || c.Name != "controller" ||
		c.ImagePullPolicy != corev1.PullIfNotPresent || spec.NodeSelector["kubernetes.io/os"] != "linux" || len(spec.NodeSelector) != 1 {
		t.Errorf("deployment: %+v", d.Spec)
	}
	if sc := c.SecurityContext; sc.AppArmorProfile != nil || sc.SELinuxOptions != nil || sc.SeccompProfile != nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("container security context %+v: empty profiles must not be rendered", sc)
	}
	e := env(c)
	for k, v := range map[string]string{"CLUSTER_NAME": "orders", "PREFERENCE_POLICY": "Respect", "MIN_VALUES_POLICY": "Strict",
		"LOG_OUTPUT_PATHS": "stdout", "LOG_ERROR_OUTPUT_PATHS": "stderr", "BATCH_MAX_DURATION": "10s", "AMI_REFRESH_INTERVAL": "1m",
		"SUBNET_REFRESH_INTERVAL": "1m", "SECURITY_GROUP_REFRESH_INTERVAL": "1m"} {
		if e[k] != v {
			t.Errorf("%s=%q, want %q", k, e[k], v)
		}
	}
	if !strings.Contains(e["FEATURE_GATES"], "PodDeletionCostManagement=false") || !strings.Contains(e["FEATURE_GATES"], "ReservedCapacity=true") {
		t.Errorf("FEATURE_GATES=%q", e["FEATURE_GATES"])
	}
	if spec.SecurityContext.FSGroup == nil || *spec.SecurityContext.RunAsNonRoot != true {
		t.Errorf("pod security context %+v", spec.SecurityContext)
	}
}

// Every key Capstan's chart used to ignore now has its effect.
func TestKarpenterKeysTakeEffect(t *testing.T) {
	values := `
nameOverride: autoscaler
imagePullPolicy: Always
imagePullSecrets: [{name: regcred}]
additionalClusterRoleRules:
  - {apiGroups: [""], resources: [configmaps], verbs: [get]}
revisionHistoryLimit: 3
strategy: {type: Recreate}
hostNetwork: true
schedulerName: my-scheduler
dnsConfig: {options: [{name: ndots, value: "1"}]}
initContainers: [{name: wait, image: busybox}]
extraVolumes: [{name: token, emptyDir: {}}]
controller:
  containerName: capstan-controller
  envFrom: [{configMapRef: {name: extra}}]
  extraVolumeMounts: [{name: token, mountPath: /var/run/token, readOnly: true}]
  sidecarContainer: [{name: proxy, image: envoy}]
  sidecarVolumeMounts: [{name: token, mountPath: /token}]
  securityContext:
    seccompProfile: {type: RuntimeDefault}
logOutputPaths: [stdout, /tmp/capstan.log]
serviceMonitor:
  enabled: true
  relabelings: [{action: keep}]
  metricRelabelings: [{action: drop}]
  sampleLimit: 5000
settings:
  clusterName: orders
  preferencePolicy: Ignore
  minValuesPolicy: BestEffort
  disableDryRun: true
  isolatedVPC: true
  eksControlPlane: true
  reservedENIs: "1"
`
	out, err := render(t, []string{values})
	if err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	object(t, out, "Deployment", &d)
	spec := d.Spec.Template.Spec
	if d.Name != "capstan-autoscaler" || *d.Spec.RevisionHistoryLimit != 3 || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType ||
		!spec.HostNetwork || spec.SchedulerName != "my-scheduler" || spec.DNSConfig == nil || len(spec.ImagePullSecrets) != 1 ||
		len(spec.InitContainers) != 1 || len(spec.Volumes) != 1 {
		t.Errorf("deployment %s: %+v", d.Name, spec)
	}
	if len(spec.Containers) != 2 {
		t.Fatalf("%d containers, want the controller and the sidecar", len(spec.Containers))
	}
	c, side := spec.Containers[0], spec.Containers[1]
	if c.Name != "capstan-controller" || c.ImagePullPolicy != corev1.PullAlways || len(c.EnvFrom) != 1 || len(c.VolumeMounts) != 1 ||
		c.SecurityContext.SeccompProfile == nil || c.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("controller container %+v", c)
	}
	if side.Name != "proxy" || len(side.VolumeMounts) != 2 {
		t.Errorf("sidecar %+v: want the extra and the sidecar volume mounts", side)
	}
	e := env(c)
	if e["LOG_OUTPUT_PATHS"] != "stdout,/tmp/capstan.log" || e["PREFERENCE_POLICY"] != "Ignore" || e["MIN_VALUES_POLICY"] != "BestEffort" ||
		e["ISOLATED_VPC"] != "true" || e["EKS_CONTROL_PLANE"] != "true" || e["RESERVED_ENIS"] != "1" {
		t.Errorf("env %v", e)
	}
	for _, m := range c.Env {
		if m.Name == "MEMORY_LIMIT" && m.ValueFrom.ResourceFieldRef.ContainerName != "capstan-controller" {
			t.Errorf("MEMORY_LIMIT reads container %q", m.ValueFrom.ResourceFieldRef.ContainerName)
		}
	}
	var role rbacv1.ClusterRole
	object(t, out, "ClusterRole", &role)
	if last := role.Rules[len(role.Rules)-1]; len(last.Resources) != 1 || last.Resources[0] != "configmaps" {
		t.Errorf("the additional rule is not in the ClusterRole: %+v", last)
	}
	for _, want := range []string{"sampleLimit: 5000", "relabelings:", "metricRelabelings:"} {
		if !strings.Contains(out, want) {
			t.Errorf("the ServiceMonitor lacks %q", want)
		}
	}
}

// Settings Capstan cannot honour are refused when set, naming the key and the reason.
func TestUnsupportedSettingsAreRefusedWithTheReason(t *testing.T) {
	for set, reason := range map[string]string{
		"settings.enableZonalShift=true":                 "zonal shifts",
		"settings.enableDRA=true":                        "DRA devices",
		"settings.ignoreDRARequests=false":               "does not simulate DRA devices",
		"settings.legacyNodeRepair=true":                 "legacy node.health controller",
		"settings.disableClusterStateObservability=true": "cannot be turned off",
		"settings.awsFeatureGates.nodeClassCEL=true":     "does not implement it",
		"settings.awsFeatureGates.draEFA=true":           "does not implement it",
	} {
		key, _, _ := strings.Cut(set, "=")
		_, err := render(t, nil, "settings.clusterName=orders", set)
		if err == nil || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "is refused") || !strings.Contains(err.Error(), reason) {
			t.Errorf("%s: %v; want a refusal naming %s and %q", set, err, key, reason)
		}
	}
	// At their defaults the same keys install.
	if _, err := render(t, []string{karpenterDefaults}, "settings.disableDryRun=true", "settings.featureGates.spotToSpotConsolidation=true",
		"settings.featureGates.nodeOverlay=true", "settings.featureGates.staticCapacity=true",
		"settings.featureGates.nodeRepair=true", "settings.featureGates.terminateFirstDrift=true",
		"settings.featureGates.terminateFirstRepair=true"); err != nil {
		t.Errorf("accepted settings refused: %v", err)
	}
}

// A values file that keeps Karpenter's image would run Karpenter under Capstan's chart.
func TestKarpenterImageIsRefused(t *testing.T) {
	_, err := render(t, []string{karpenterDefaults}, "controller.image.repository=public.ecr.aws/karpenter/controller",
		"controller.image.tag=1.14.1")
	if err == nil || !strings.Contains(err.Error(), "controller.image.repository") || !strings.Contains(err.Error(), "Karpenter's image") {
		t.Fatalf("Karpenter's image: %v", err)
	}
}

// A key neither chart has — a typo — is refused by the schema, which names it.
func TestUnknownKeysAreRefused(t *testing.T) {
	for _, tc := range []struct{ set, where, key string }{
		{"replica=3", "at ''", "replica"},
		{"settings.isolatedVpc=true", "at '/settings'", "isolatedVpc"},
		{"controller.imagee.tag=x", "at '/controller'", "imagee"},
		{"settings.featureGates.nodeRepairs=true", "at '/settings/featureGates'", "nodeRepairs"},
	} {
		_, err := render(t, nil, "settings.clusterName=orders", tc.set)
		if err == nil || !strings.Contains(err.Error(), tc.where) || !strings.Contains(err.Error(), "'"+tc.key+"' not allowed") {
			t.Errorf("%s: %v; want the schema to refuse %q %s", tc.set, err, tc.key, tc.where)
		}
	}
}

// The CRD chart takes Karpenter's karpenter-crd value, additionalAnnotations, onto every CRD.
func TestCRDChartValues(t *testing.T) {
	root := moduleRoot(t)
	helm := filepath.Join(root, "bin", "helm")
	chart := filepath.Join(root, "charts", "capstan-crd")
	out, err := exec.Command(helm, "template", "capstan-crd", chart, "--set", "additionalAnnotations.team=platform").CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	docs := strings.Split(string(out), "\n---\n")
	crds := 0
	for _, doc := range docs {
		var crd struct {
			Kind     string
			Metadata struct {
				Name        string
				Annotations map[string]string
			}
		}
		if err := yaml.Unmarshal([]byte(doc), &crd); err != nil {
			t.Fatal(err)
		}
		if crd.Kind != "CustomResourceDefinition" {
			continue
		}
		crds++
		if crd.Metadata.Annotations["team"] != "platform" || crd.Metadata.Annotations["controller-gen.kubebuilder.io/version"] == "" {
			t.Errorf("%s: annotations %v", crd.Metadata.Name, crd.Metadata.Annotations)
		}
	}
	// NodePool, NodeClaim, NodeOverlay, EC2NodeClass, CapacityBuffer, ProvisioningRequest and
	// SimNodeClass.
	if crds != 7 {
		t.Errorf("%d CRDs rendered, want 7", crds)
	}
	// One values file may serve both charts, as with Karpenter's: the controller chart's keys are
	// accepted and unused; a wrong type for the CRD chart's own key is refused.
	if out, err := exec.Command(helm, "template", "capstan-crd", chart, "-f", filepath.Join(root, "examples", "aws", "karpenter-values.yaml")).CombinedOutput(); err != nil {
		t.Errorf("the runbook's values file: %v\n%s", err, out)
	}
	if out, err := exec.Command(helm, "template", "capstan-crd", chart, "--set", "additionalAnnotations=x").CombinedOutput(); err == nil ||
		!strings.Contains(string(out), "additionalAnnotations") {
		t.Errorf("additionalAnnotations=x: %v\n%s", err, out)
	}
}

// Capstan's own settings with a chart key reach the binary only when set (the binary's defaults
// stand otherwise); 0 is a value, not an absence.
func TestCapstanSettings(t *testing.T) {
	out, err := render(t, []string{"settings: {clusterName: orders, underutilizedConsolidationK: 0, nodeCost: 0.012, spendingLimit: 250.5}\n"})
	if err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	object(t, out, "Deployment", &d)
	if e := env(d.Spec.Template.Spec.Containers[0]); e["UNDERUTILIZED_CONSOLIDATION_K"] != "0" || e["NODE_COST"] != "0.012" || e["SPENDING_LIMIT"] != "250.5" {
		t.Errorf("UNDERUTILIZED_CONSOLIDATION_K=%q NODE_COST=%q SPENDING_LIMIT=%q", e["UNDERUTILIZED_CONSOLIDATION_K"], e["NODE_COST"], e["SPENDING_LIMIT"])
	}
	out, err = render(t, nil, "settings.clusterName=orders")
	if err != nil {
		t.Fatal(err)
	}
	object(t, out, "Deployment", &d)
	for _, k := range []string{"UNDERUTILIZED_CONSOLIDATION_K", "NODE_COST", "SPENDING_LIMIT"} {
		if _, set := env(d.Spec.Template.Spec.Containers[0])[k]; set {
			t.Errorf("%s set by default", k)
		}
	}
	if _, err := render(t, nil, "settings.clusterName=orders", "settings.nodeCost=-1"); err == nil || !strings.Contains(err.Error(), "/settings/nodeCost") {
		t.Errorf("a negative node cost: %v", err)
	}
	if _, err := render(t, nil, "settings.clusterName=orders", "settings.spendingLimit=-5"); err == nil || !strings.Contains(err.Error(), "/settings/spendingLimit") {
		t.Errorf("a negative spending limit: %v", err)
	}
	// The kube-scheduler's default constraints reach SCHEDULER_CONFIG as written.
	cfg := "podTopologySpread:\n  defaultConstraints:\n  - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule}\n"
	out, err = render(t, []string{"settings:\n  clusterName: orders\n  schedulerConfig: |\n" + indent(cfg, "    ")})
	if err != nil {
		t.Fatal(err)
	}
	object(t, out, "Deployment", &d)
	if got := env(d.Spec.Template.Spec.Containers[0])["SCHEDULER_CONFIG"]; got != cfg {
		t.Errorf("SCHEDULER_CONFIG=%q, want %q", got, cfg)
	}
}

func indent(s, by string) string {
	lines := strings.SplitAfter(s, "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = by + l
		}
	}
	return strings.Join(lines, "")
}

// The chart cannot point at nothing: no Capstan image is published, so rendering without one
// fails, naming the key and how to get an image; and what the binary would refuse at start is
// refused at render, naming the key.
func TestTheChartRefusesWhatWouldNotRun(t *testing.T) {
	_, err := renderWith(t, nil, "settings.clusterName=orders")
	if err == nil || !strings.Contains(err.Error(), "controller.image.repository is required") || !strings.Contains(err.Error(), "make release") {
		t.Errorf("the chart's defaults rendered (err %v); want a failure naming controller.image.repository and make release", err)
	}
	for _, tc := range []struct {
		sets []string
		want string
	}{
		{[]string{"settings.replaceOnRebalanceRecommendation=true"}, "settings.replaceOnRebalanceRecommendation=true needs settings.interruptionQueue"},
	} {
		_, err := render(t, nil, append([]string{"settings.clusterName=orders"}, tc.sets...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--set %v rendered (err %v); want a failure saying %q", tc.sets, err, tc.want)
		}
	}
	// What each needs, given, renders.
	for _, sets := range [][]string{
		{"settings.replaceOnRebalanceRecommendation=true", "settings.interruptionQueue=orders"},
	} {
		if _, err := render(t, nil, append([]string{"settings.clusterName=orders"}, sets...)...); err != nil {
			t.Errorf("--set %v: %v", sets, err)
		}
	}
}

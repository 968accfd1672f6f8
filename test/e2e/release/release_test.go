// Package release publishes Capstan as a user installs it: `make release` to a real OCI registry
// (the CNCF distribution registry, built by hack/tools.sh) on loopback, then the image and both
// charts pulled back from it.
package release

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/imagebuild"
	"capstan.dev/capstan/internal/localcluster"
	"capstan.dev/capstan/internal/scheme"
	"capstan.dev/capstan/internal/testenv"
)

const version = "0.0.1-e2e"

// startRegistry runs bin/registry on a free loopback port with its storage in a temporary
// directory, and returns its host:port once it answers.
func startRegistry(t *testing.T, root string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	dir := t.TempDir()
	config := fmt.Sprintf("version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: %s\n  delete:\n    enabled: true\nhttp:\n  addr: %s\n",
		filepath.Join(dir, "data"), addr)
	cfgPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "registry.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(root, "bin", "registry"), "serve", cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the registry (built by hack/tools.sh): %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = logf.Close()
	})
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		resp, err := http.Get("http://" + addr + "/v2/")
		if err != nil {
			return false, nil
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		log, _ := os.ReadFile(logf.Name())
		t.Fatalf("the registry did not answer on %s: %v\n%s", addr, err, log)
	}
	return addr
}

// release runs `make release`, writing the image layout and the charts under out, and returns
// what it printed: artifact kind to "reference@digest".
func release(t *testing.T, root, out, registry string) map[string]string {
	t.Helper()
	// The plugin for this machine's platform only: the others are the same build with other
	// GOOS and GOARCH, minutes each on 2 cores (hack/release's test packages all four).
	cmd := exec.Command("make", "release", "VERSION="+version, "REGISTRY="+registry, "PLAIN_HTTP=true",
		"IMAGE_DIR="+filepath.Join(out, "image"), "CHARTS_DIR="+filepath.Join(out, "charts"),
		"PLUGIN_DIR="+filepath.Join(out, "plugin"), "PLUGIN_PLATFORMS="+runtime.GOOS+"/"+runtime.GOARCH)
	cmd.Dir = root
	var stderr strings.Builder
	cmd.Stderr = &stderr
	printed, err := cmd.Output()
	if err != nil {
		t.Fatalf("make release: %v\n%s\n%s", err, printed, stderr.String())
	}
	got := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(string(printed)))
	for sc.Scan() {
		kind, ref, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		switch kind {
		case "image":
			got["image"] = ref
		case "plugin":
			got["plugin"] = ref
		case "chart":
			if strings.Contains(ref, "/capstan-crd:") {
				got["capstan-crd"] = ref
			} else {
				got["capstan"] = ref
			}
		}
	}
	for _, k := range []string{"image", "capstan-crd", "capstan", "plugin"} {
		if got[k] == "" {
			t.Fatalf("make release printed no %s line:\n%s", k, printed)
		}
	}
	return got
}

func helm(t *testing.T, root string, args ...string) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(root, "bin", "helm"), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// `make release` pushes the multi-platform image and both charts at one version; the image
// pulled back is the one `make image` wrote, with its labels; the capstan chart pulled back names
// that image by digest and renders it; both charts install from the registry on a local cluster
// as the runbook installs them (CRD chart first, then the controller chart with the runbook's
// Karpenter values file); a second release of the same source pushes the same image digest.
func TestReleaseToARegistry(t *testing.T) {
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	registry := startRegistry(t, root) + "/capstan-e2e"
	out := t.TempDir()
	got := release(t, root, out, registry)

	// The image.
	repo, digest, ok := strings.Cut(got["image"], "@")
	if !ok || repo != registry+"/controller" {
		t.Fatalf("image line %q, want %s/controller@sha256:…", got["image"], registry)
	}
	written, err := os.ReadFile(filepath.Join(out, "image.digest"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(written)) != digest {
		t.Fatalf("pushed %s, make image wrote %s", digest, written)
	}
	ref, err := name.ParseReference(repo+":"+version, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(ref)
	if err != nil {
		t.Fatalf("pulling %s: %v", ref, err)
	}
	if d, _ := idx.Digest(); d.String() != digest {
		t.Fatalf("the registry serves %s as %s, pushed %s", ref, d, digest)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var platforms []string
	for _, m := range im.Manifests {
		platforms = append(platforms, m.Platform.String())
		img, err := idx.Image(m.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Config.Labels[imagebuild.LabelVersion] != version || len(cf.Config.Labels[imagebuild.LabelRevision]) != 40 {
			t.Errorf("%s: labels %v", m.Platform, cf.Config.Labels)
		}
	}
	if strings.Join(platforms, ",") != "linux/amd64,linux/arm64" {
		t.Errorf("platforms %v", platforms)
	}

	// The charts.
	dir := t.TempDir()
	for _, chart := range []string{"capstan-crd", "capstan"} {
		helm(t, root, "pull", "oci://"+registry+"/"+chart, "--version", version, "--plain-http", "--untar", "--untardir", dir)
		var meta struct{ Version, AppVersion string }
		b, err := os.ReadFile(filepath.Join(dir, chart, "Chart.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, &meta); err != nil {
			t.Fatal(err)
		}
		if meta.Version != version || meta.AppVersion != version {
			t.Errorf("chart %s pulled back at version %q, appVersion %q; want %s", chart, meta.Version, meta.AppVersion, version)
		}
	}
	rendered := helm(t, root, "template", "capstan", filepath.Join(dir, "capstan"), "--namespace", "kube-system",
		"--set", "settings.clusterName=e2e")
	if want := "image: " + repo + "@" + digest; !strings.Contains(rendered, want) {
		t.Errorf("the released chart does not render %q", want)
	}

	// Installed from the registry, as the runbook does, on a cluster without Capstan's CRDs.
	kubeconfig := install(t, root, registry, repo+"@"+digest)

	// The plugin, installed from the release's archive with krew, runs without Go.
	plugin(t, root, got["plugin"], kubeconfig)

	// Same source, same image.
	again := release(t, root, t.TempDir(), registry)
	if again["image"] != got["image"] {
		t.Errorf("a second release of the same source pushed %s, the first %s", again["image"], got["image"])
	}
}

// karpenterCRDs are the CRDs of Karpenter v1.15's karpenter-crd chart, all of which Capstan's
// capstan-crd chart replaces.
var karpenterCRDs = []string{"nodepools.karpenter.sh", "nodeclaims.karpenter.sh", "nodeoverlays.karpenter.sh", "ec2nodeclasses.karpenter.k8s.aws",
	"capacitybuffers.autoscaling.x-k8s.io"}

// install moves a cluster from Karpenter's CRD chart to Capstan's as docs/install.md says, then
// runs the runbook's two helm commands against the registry on a fresh local cluster, and
// checks that the CRDs, the Deployment (running the released image by digest), the ServiceAccount
// (with the values file's IRSA annotation) and the RBAC exist as the chart renders them. It
// returns the cluster's kubeconfig.
func install(t *testing.T, root, registry, image string) string {
	t.Helper()
	assets, err := testenv.AssetsDir()
	if err != nil {
		t.Fatal(err)
	}
	cluster, err := localcluster.Start(context.Background(), localcluster.Options{Dir: t.TempDir(), AssetsDir: assets, Log: logr.Discard(), NoCRDs: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Stop() })
	kc := "--kubeconfig=" + cluster.KubeconfigPath
	sch, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	if err := apiextensionsv1.AddToScheme(sch); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cluster.Config, client.Options{Scheme: sch})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	// The cluster ran Karpenter v1.15, its CRDs from its karpenter-crd chart, with a NodePool.
	karpenterCRD, err := testenv.WriteKarpenterChart("karpenter-crd", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	helm(t, root, "install", "karpenter-crd", karpenterCRD, "--namespace", "kube-system", "--wait", kc)
	np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "general"}}
	np.Spec.Template.Spec.NodeClassRef = &karpv1.NodeClassReference{Group: "karpenter.k8s.aws", Kind: "EC2NodeClass", Name: "default"}
	np.Spec.Template.Spec.Requirements = []karpv1.NodeSelectorRequirementWithMinValues{{Key: karpv1.CapacityTypeLabelKey,
		Operator: karpv1.NodeSelectorOpIn, Values: []string{karpv1.CapacityTypeOnDemand}}}
	if err := c.Create(ctx, np); err != nil {
		t.Fatalf("a NodePool under Karpenter's CRDs: %v", err)
	}
	// The move, as docs/install.md gives it: the CRDs handed to the capstan-crd release and the
	// karpenter-crd release forgotten without deleting them (helm uninstall would delete the CRDs
	// and every NodePool and NodeClaim with them).
	move := [][]string{
		append([]string{"annotate", "crd"}, append(slices.Clone(karpenterCRDs), "meta.helm.sh/release-name=capstan-crd",
			"meta.helm.sh/release-namespace=kube-system", "--overwrite")...),
		append([]string{"label", "crd"}, append(slices.Clone(karpenterCRDs), "app.kubernetes.io/managed-by=Helm", "--overwrite")...),
		{"delete", "secret", "--namespace", "kube-system", "--selector", "owner=helm,name=karpenter-crd"},
	}
	for _, args := range move {
		if out, err := exec.Command("kubectl", append(args, kc)...).CombinedOutput(); err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	helm(t, root, "install", "capstan-crd", "oci://"+registry+"/capstan-crd", "--version", version, "--plain-http",
		"--namespace", "kube-system", "--wait", kc)
	got := &karpv1.NodePool{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(np), got); err != nil || got.UID != np.UID {
		t.Errorf("the NodePool made under Karpenter's CRDs did not survive the move: %v", err)
	}
	if out, err := exec.Command(filepath.Join(root, "bin", "helm"), "status", "karpenter-crd", "--namespace", "kube-system", kc).CombinedOutput(); err == nil {
		t.Errorf("the karpenter-crd release is still recorded:\n%s", out)
	}
	helm(t, root, "upgrade", "--install", "capstan", "oci://"+registry+"/capstan", "--version", version, "--plain-http",
		"--namespace", "kube-system", "-f", filepath.Join(root, "examples", "aws", "karpenter-values.yaml"), kc)

	for _, crd := range append(slices.Clone(karpenterCRDs), "simnodeclasses.capstan.dev") {
		var o apiextensionsv1.CustomResourceDefinition
		if err := c.Get(ctx, client.ObjectKey{Name: crd}, &o); err != nil {
			t.Errorf("CRD %s: %v", crd, err)
		} else if o.Annotations["meta.helm.sh/release-name"] != "capstan-crd" {
			t.Errorf("CRD %s is not the capstan-crd release's: %v", crd, o.Annotations)
		}
	}
	var d appsv1.Deployment
	if err := c.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "capstan"}, &d); err != nil {
		t.Fatalf("the Deployment: %v", err)
	}
	if got := d.Spec.Template.Spec.Containers[0].Image; got != image {
		t.Errorf("the Deployment runs %s, want the released %s", got, image)
	}
	if *d.Spec.Replicas != 2 || d.Spec.Template.Spec.NodeSelector["workload"] != "system" {
		t.Errorf("the Deployment does not follow the runbook's values: replicas %d, node selector %v", *d.Spec.Replicas, d.Spec.Template.Spec.NodeSelector)
	}
	var sa corev1.ServiceAccount
	if err := c.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "capstan"}, &sa); err != nil {
		t.Errorf("the ServiceAccount: %v", err)
	} else if !strings.Contains(sa.Annotations["eks.amazonaws.com/role-arn"], "KarpenterControllerRole-prod-east") {
		t.Errorf("the ServiceAccount's annotations %v lack the values file's role", sa.Annotations)
	}
	var cr rbacv1.ClusterRole
	if err := c.Get(ctx, client.ObjectKey{Name: "capstan"}, &cr); err != nil || len(cr.Rules) == 0 {
		t.Errorf("the ClusterRole: %v (%d rules)", err, len(cr.Rules))
	}
	var crb rbacv1.ClusterRoleBinding
	if err := c.Get(ctx, client.ObjectKey{Name: "capstan"}, &crb); err != nil || len(crb.Subjects) != 1 || crb.Subjects[0].Name != sa.Name {
		t.Errorf("the ClusterRoleBinding: %v %+v", err, crb.Subjects)
	}
	return cluster.KubeconfigPath
}

// plugin installs the kubectl plugin as docs/install.md says, with krew (built by hack/tools.sh)
// from the release's manifest and this platform's archive, into a fresh krew root, and runs it
// through kubectl with a PATH that holds kubectl and the krew root's bin/ only — no Go: its
// version is the release's, and it explains the NodePool on the cluster the charts went to.
func plugin(t *testing.T, root, manifest, kubeconfig string) {
	t.Helper()
	archive := filepath.Join(filepath.Dir(manifest), fmt.Sprintf("kubectl-capstan_%s_%s.tar.gz", runtime.GOOS, runtime.GOARCH))
	krewRoot := t.TempDir()
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatal(err)
	}
	onlyKubectl := t.TempDir()
	if err := os.Symlink(kubectl, filepath.Join(onlyKubectl, "kubectl")); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "KREW_ROOT="+krewRoot, "PATH="+filepath.Join(krewRoot, "bin")+":"+onlyKubectl, "KUBECONFIG="+kubeconfig)
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run(filepath.Join(root, "bin", "krew"), "install", "--manifest="+manifest, "--archive="+archive)
	if out := run("kubectl", "capstan", "--version"); !strings.Contains(out, version) {
		t.Errorf("kubectl capstan --version printed %q, want the release's %s", out, version)
	}
	if out := run("kubectl", "capstan", "explain", "nodepool", "general", "--cloud-provider", "sim"); !strings.Contains(out, "general") {
		t.Errorf("kubectl capstan explain nodepool general printed:\n%s", out)
	}
}

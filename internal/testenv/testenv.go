// Package testenv gives tests a real kube-apiserver and etcd — the binaries hack/tools.sh builds
// from Go modules — with Capstan's CRDs installed, through controller-runtime's envtest.
package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"capstan.dev/capstan/config/crd"
	"capstan.dev/capstan/internal/scheme"
)

// Env is a running API server with Capstan's CRDs.
type Env struct {
	// Config reaches the API server as a cluster administrator.
	Config *rest.Config
	// Client is a controller-runtime client over Config with Capstan's scheme.
	Client client.Client
	// Scheme is Capstan's scheme.
	Scheme *runtime.Scheme
	// AssetsDir holds the control-plane binaries in use.
	AssetsDir string
	// Kubeconfig is an administrator kubeconfig for the API server, for kubectl.
	Kubeconfig []byte

	env *envtest.Environment
}

// Start starts etcd and kube-apiserver and installs the CRDs.
func Start() (*Env, error) {
	dir, err := AssetsDir()
	if err != nil {
		return nil, err
	}
	s, err := scheme.New()
	if err != nil {
		return nil, err
	}
	crds, err := crd.Load()
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: dir,
		Scheme:                s,
		CRDs:                  crds,
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	if err != nil {
		// envtest leaves etcd and kube-apiserver running when installing the CRDs fails.
		_ = env.Stop()
		return nil, fmt.Errorf("starting envtest with binaries from %s: %w", dir, err)
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("creating client: %w", err)
	}
	return &Env{Config: cfg, Client: c, Scheme: s, AssetsDir: dir, Kubeconfig: env.KubeConfig, env: env}, nil
}

// Stop stops the API server and etcd and removes their data.
func (e *Env) Stop() error {
	if err := e.env.Stop(); err != nil {
		return fmt.Errorf("stopping envtest: %w", err)
	}
	return nil
}

// CRDs returns the installed CRDs.
func (e *Env) CRDs() []*apiextensionsv1.CustomResourceDefinition { return e.env.CRDs }

// Main runs a package's tests against one API server: call it from TestMain. It exits the
// process with the tests' status.
func Main(m *testing.M, env **Env) {
	e, err := Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testenv:", err)
		os.Exit(1)
	}
	*env = e
	code := m.Run()
	if err := e.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "testenv:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// AssetsDir finds the control-plane binaries: $KUBEBUILDER_ASSETS if set, else bin/ at the root
// of the module (where hack/tools.sh links them).
func AssetsDir() (string, error) {
	if d := os.Getenv("KUBEBUILDER_ASSETS"); d != "" {
		return d, nil
	}
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, "bin")
	if _, err := os.Stat(filepath.Join(dir, "kube-apiserver")); err != nil {
		return "", fmt.Errorf("no kube-apiserver in %s: run hack/tools.sh (make tools) to build the control plane: %w", dir, err)
	}
	return dir, nil
}

// ModuleRoot is the directory of Capstan's go.mod, found from the working directory up.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("finding module root: %w", err)
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && isCapstanModule(b) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("finding module root: no go.mod of capstan.dev/capstan above the working directory")
		}
		dir = parent
	}
}

func isCapstanModule(gomod []byte) bool {
	const want = "module capstan.dev/capstan\n"
	return len(gomod) >= len(want) && string(gomod[:len(want)]) == want
}

package amifamily_test

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"capstan.dev/capstan/internal/cloudprovider/aws/amifamily"
)

var update = flag.Bool("update", false, "rewrite the golden user data files")

// TestUserDataMatchesTheGoldenFiles keeps each family's user data, for one class with its own
// user data in that family's format, in testdata/userdata/<family>.golden: the files are what a
// reviewer compares with Karpenter's documented formats (AL2: a MIME multi-part whose last part
// calls bootstrap.sh; AL2023: a MIME multi-part whose first part is the NodeConfig; Bottlerocket:
// one TOML document; Windows: one <powershell> block; Custom: the class's data as it is), and any
// change to them shows in review. `go test ./internal/cloudprovider/aws/amifamily/ -run Golden
// -update` rewrites them.
func TestUserDataMatchesTheGoldenFiles(t *testing.T) {
	custom := map[amifamily.Family]string{
		amifamily.AL2:          "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"CLASS\"\n\n--CLASS\nContent-Type: text/x-shellscript; charset=\"us-ascii\"\n\n#!/bin/bash\necho 'vm.max_map_count=262144' > /etc/sysctl.d/99-class.conf\n\n--CLASS--\n",
		amifamily.AL2023:       "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"CLASS\"\n\n--CLASS\nContent-Type: application/node.eks.aws\n\napiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n    config:\n      shutdownGracePeriod: 30s\n\n--CLASS--\n",
		amifamily.Bottlerocket: "[settings.kubernetes]\nkube-api-qps = 30\n\n[settings.host-containers.admin]\nenabled = true\n",
		amifamily.Windows2022:  "<powershell>\nWrite-Host \"class data\"\n</powershell>\n",
		amifamily.Custom:       "#!/bin/bash\n/etc/eks/bootstrap.sh prod --kubelet-extra-args '--register-with-taints=karpenter.sh/unregistered:NoExecute'\n",
	}
	for family, data := range custom {
		got, err := amifamily.UserData(family, bootstrap(data))
		if err != nil {
			t.Fatalf("%s: %v", family, err)
		}
		path := filepath.Join("testdata", "userdata", strings.ToLower(string(family))+".golden")
		if *update {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%s: %v (run with -update to write it)", family, err)
		}
		if got != string(want) {
			t.Errorf("%s user data differs from %s:\n%s", family, path, got)
		}
	}
}

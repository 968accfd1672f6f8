// Command image builds Capstan's multi-platform container image into an OCI image layout
// (`make image`): static linux binaries of ./cmd/capstan, built reproducibly (-trimpath, no build
// ID, the commit's VCS stamp), assembled by internal/imagebuild. It prints the index's digest and
// writes it next to the layout (<out>.digest).
//
//	go run ./hack/image -version v0.1.0 -out bin/image [-platforms linux/amd64,linux/arm64]
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"capstan.dev/capstan/internal/imagebuild"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run() error {
	version := flag.String("version", "", "the release version (the image's version label and `capstan --version`)")
	out := flag.String("out", "bin/image", "the OCI image layout directory to write")
	platforms := flag.String("platforms", "linux/amd64,linux/arm64", "comma-separated platforms")
	source := flag.String("source", "", "the repository URL for the source label")
	flag.Parse()
	if *version == "" {
		return fmt.Errorf("-version is required")
	}
	commit, err := git("rev-parse", "HEAD")
	if err != nil {
		return err
	}
	// Every timestamp in the image is the commit's time (SOURCE_DATE_EPOCH when set).
	epoch := os.Getenv("SOURCE_DATE_EPOCH")
	if epoch == "" {
		if epoch, err = git("log", "-1", "--format=%ct"); err != nil {
			return err
		}
	}
	secs, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		return fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", epoch, err)
	}
	opts := imagebuild.Options{Version: *version, Commit: commit, Created: time.Unix(secs, 0), Source: *source}
	tmp, err := os.MkdirTemp("", "capstan-image-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	for _, pl := range strings.Split(*platforms, ",") {
		osName, arch, ok := strings.Cut(strings.TrimSpace(pl), "/")
		if !ok || osName != "linux" || arch == "" {
			return fmt.Errorf("-platforms: %q is not linux/<arch>", pl)
		}
		bin := filepath.Join(tmp, arch, "capstan")
		fmt.Fprintf(os.Stderr, "image: building %s for linux/%s\n", *version, arch)
		cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=true",
			"-ldflags", "-s -w -buildid= -X main.version="+*version, "-o", bin, "./cmd/capstan")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch, "GOFLAGS=-mod=readonly")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("building linux/%s: %w", arch, err)
		}
		data, err := os.ReadFile(bin)
		if err != nil {
			return err
		}
		opts.Binaries = append(opts.Binaries, imagebuild.Binary{Arch: arch, Data: data})
	}
	idx, err := imagebuild.Build(opts)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(*out); err != nil {
		return err
	}
	digest, err := imagebuild.WriteLayout(*out, *version, idx)
	if err != nil {
		return err
	}
	if err := os.WriteFile(*out+".digest", []byte(digest.String()+"\n"), 0o644); err != nil {
		return err
	}
	fmt.Println(digest)
	return nil
}

func git(args ...string) (string, error) {
	out, err := exec.Command("git", args...).Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}

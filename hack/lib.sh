# Shared by the hack/ scripts (sourced, not run).

# A script may run where HOME is unset (some CI runners, `env -i`); Go and the tool cache need a
# home, so take the account's from the password database, or the repository's .cache.
if [ -z "${HOME:-}" ]; then
  HOME=$(getent passwd "$(id -u)" 2>/dev/null | cut -d: -f6 || true)
  [ -n "$HOME" ] && [ -d "$HOME" ] || HOME="$root/.cache/home"
  mkdir -p "$HOME"
  export HOME
fi
cache_home="${XDG_CACHE_HOME:-$HOME/.cache}"

# remove_dir deletes a directory tree only when its path ends with the expected suffix and is not
# a root, a home or the repository itself: a variable that came out wrong fails loudly instead.
remove_dir() {
  local dir=$1 suffix=$2
  case "$dir" in
    ""|/|/*/..|*/../*|"$HOME"|"$HOME/"|"$root"|"$root/") echo "refusing to remove '$dir'" >&2; return 1 ;;
  esac
  case "$dir" in
    /*"$suffix") ;;
    *) echo "refusing to remove '$dir': not an absolute path ending in $suffix" >&2; return 1 ;;
  esac
  rm -rf -- "$dir"
}

# port_taken reports whether something listens on 127.0.0.1:$1.
port_taken() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# karpenter_go runs the go command in hack/conformance, the module that pins Karpenter (outside
# Capstan's), with the Go 1.27 Karpenter v1.15 needs (the go command fetches it).
karpenter_go() { (cd "$root/hack/conformance" && GOTOOLCHAIN=go1.27.3 GOFLAGS=-mod=readonly go "$@"); }

# karpenter_kwok prints the path of Karpenter's kwok provider built from that module, building it
# once per pin (cached under the hash of its go.mod and go.sum).
karpenter_kwok() {
  local mod="$root/hack/conformance" key bin
  key=$(cat "$mod/go.mod" "$mod/go.sum" | sha256sum | cut -c1-16)
  bin="$cache_home/capstan/karpenter-kwok/$key/karpenter-kwok"
  if [ ! -x "$bin" ]; then
    printf "building Karpenter's kwok provider (once per pin)\n" >&2
    mkdir -p "$(dirname "$bin")"
    karpenter_go build -o "$bin.tmp.$$" sigs.k8s.io/karpenter/kwok || return 1
    mv "$bin.tmp.$$" "$bin"
  fi
  echo "$bin"
}

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

#!/usr/bin/env bash
# Installs the AWS CLI when it is missing: `make test` drives the local AWS endpoints with it
# (test/awsfake TestTheAWSCLIReadsTheEndpoints), a client other than the SDK Capstan uses.
# Installs with apt-get (as root); fails, saying why, where it cannot.
set -euo pipefail
command -v aws >/dev/null && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "ensure-awscli: installing awscli (apt-get)" >&2
  if apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq awscli >/dev/null; then
    exit 0
  fi
  echo "ensure-awscli: apt-get could not install awscli" >&2
  exit 1
fi
echo "ensure-awscli: the aws CLI is not installed and cannot be installed here (needs root and apt-get): install it (Debian: apt-get install awscli)" >&2
exit 1

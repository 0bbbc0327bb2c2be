# Sourced by the scripts that install Debian packages (slurm-local.sh, chromium.sh,
# llama-git-repo.sh): apt_get runs apt-get one at a time. The test workers start these
# scripts side by side on a fresh machine, and a second apt-get failed at once on the
# dpkg lock the first held (a cold run of 2026-12-03: Slurm's install beside Chromium's).
# Our own calls queue on one flock; apt waits for anyone else's dpkg lock.
APT_LOCK=${APT_LOCK:-/var/lock/abbench-apt.lock}
apt_get() {
  flock -w 1800 "$APT_LOCK" apt-get -o DPkg::Lock::Timeout=900 "$@"
}

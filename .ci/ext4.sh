# Sourced by .ci/run: a small ext4 filesystem with a journal, loop-mounted, for the test that checks a new
# file's blocks are not reserved there (`replace::tests`); exported as REWIND_TEST_JOURNALLED_EXT4. Where
# the machine cannot mount one (no root, no loop device), the test checks the temporary directory only,
# and this says so.
ext4_dir=/tmp/rewind-ci-ext4j
ext4_img=/tmp/rewind-ci-ext4j.img
if ! mountpoint -q "$ext4_dir" 2>/dev/null; then
  command -v mkfs.ext4 >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq e2fsprogs; } || true
  mkdir -p "$ext4_dir"
  rm -f "$ext4_img"
  if ! { truncate -s 64M "$ext4_img" && mkfs.ext4 -q -F -j "$ext4_img" && mount -o loop "$ext4_img" "$ext4_dir"; }; then
    echo "no journalled ext4 could be mounted here: its case of the reservation test is not run" >&2
  fi
fi
if mountpoint -q "$ext4_dir" 2>/dev/null; then
  mkdir -p "$ext4_dir/tmp"
  chmod 1777 "$ext4_dir/tmp"
  export REWIND_TEST_JOURNALLED_EXT4="$ext4_dir/tmp"
  echo "journalled ext4 at $ext4_dir"
fi

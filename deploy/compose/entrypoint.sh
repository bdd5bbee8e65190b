#!/bin/sh
# The engine bind-mounts the agent into every sandbox from a path on the
# host, so the agent must live where host and container see the same file:
# in the state directory, which compose.yaml mounts at the same path.
set -eu
state=/var/lib/shellbox
mkdir -p "$state/bin"
install -m 0755 /usr/local/lib/shellbox/shellbox-agent "$state/bin/shellbox-agent.new"
mv -f "$state/bin/shellbox-agent.new" "$state/bin/shellbox-agent"
exec /usr/local/lib/shellbox/shellbox "$@"

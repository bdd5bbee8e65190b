package policies

import (
	"strings"
	"testing"
)

// bypassPolicy denies rm and allows everything else; what the reader cannot
// see through asks (unparseable).
const bypassPolicy = `default: allow
unparseable: ask
rules:
  - {name: no-rm, decision: deny, match: {command: [rm]}}
  - {name: named-python, decision: allow, match: {prefix: ["python3 -m pytest"]}}
`

// The decisions that keep a command reader honest: every way of running rm
// the reader can see is denied; every way it cannot see is dynamic or
// opaque (the tenant's unparseable and opaque decisions, both ask here),
// never allowed. D = deny by no-rm, Q = dynamic or opaque (ask), A =
// allowed (no false alarm).
type bypassCase struct {
	cmd  string
	want byte
}

var bypassCases = []bypassCase{
	// Wrapper option parsing: env -S in clusters and long forms.
	{"env -vS 'rm x'", 'D'}, {"env -iS 'rm x'", 'D'}, {"env -S'rm x'", 'D'}, {"env --split-string='rm x'", 'D'},
	{"env --split-string 'rm x'", 'D'}, {"env --spl='rm x'", 'D'}, {"env -0vS 'rm x'", 'D'},
	{"env -S '-i A=1 rm x'", 'D'}, {"env -S 'A=1' rm x", 'D'}, {`env -S 'r\_m x'`, 'Q'}, {"env -S '${X}'", 'Q'},
	{"env -S \"rm x\"", 'D'}, {"env -u HOME -C /tmp rm x", 'D'}, {"env --unset=HOME rm x", 'D'}, {"env - rm x", 'D'},
	{"env -a foo rm x", 'D'}, {"env --frob rm x", 'Q'}, {"env -Q rm x", 'Q'}, {"env --default-signal rm x", 'D'},
	{"env --default-signal=INT rm x", 'D'}, {"env -S 'env -S \"rm x\"'", 'D'},
	{"env PATH=/tmp ls", 'Q'}, {"env LD_PRELOAD=/tmp/x.so ls", 'Q'}, {"env GIT_SSH_COMMAND=x git fetch", 'Q'},
	{"env -i ls", 'A'}, {"env A=1 ls", 'A'}, {"env", 'A'},
	// GNU xargs: optional arguments only with = (long) or attached (short).
	{"xargs --replace rm x", 'D'}, {"xargs --replace=X rm X", 'D'}, {"xargs -I X rm X", 'D'}, {"xargs -IX rm X", 'D'},
	{"xargs -i rm x", 'D'}, {"xargs -iX rm X", 'D'}, {"xargs -e rm x", 'D'}, {"xargs -l rm x", 'D'},
	{"xargs --eof rm x", 'D'}, {"xargs --max-lines rm x", 'D'}, {"xargs --max-args 1 rm", 'D'}, {"xargs --max-a=1 rm", 'D'},
	{"xargs --rep rm x", 'D'}, {"xargs -0 -n1 -P4 rm", 'D'}, {"xargs -a list rm", 'D'}, {"xargs -d '\\n' rm", 'D'},
	{"xargs --frob rm", 'Q'}, {"xargs -J % rm", 'Q'}, {"xargs -I{} {} x", 'Q'}, {"xargs -n 1 echo", 'A'}, {"xargs", 'A'},
	// Every wrapper unwrapped: short clusters, --opt=value, --opt value, --.
	{"sudo -u root rm x", 'D'}, {"sudo -uroot rm x", 'D'}, {"sudo --user=root rm x", 'D'}, {"sudo --user root rm x", 'D'},
	{"sudo -E -H rm x", 'D'}, {"sudo -EH rm x", 'D'}, {"sudo -- rm x", 'D'}, {"sudo --preserve-env rm x", 'D'},
	{"sudo --preserve-env=PATH rm x", 'D'}, {"sudo -D /tmp rm x", 'D'}, {"sudo A=1 rm x", 'D'}, {"sudo PATH=/tmp ls", 'Q'},
	{"sudo -s", 'Q'}, {"sudo -i", 'Q'}, {"sudo --frob rm x", 'Q'}, {"sudo -N rm x", 'Q'}, {"sudo -l", 'A'}, {"sudo -e f", 'A'},
	{"nice rm x", 'D'}, {"nice -n 5 rm x", 'D'}, {"nice -n5 rm x", 'D'}, {"nice -5 rm x", 'D'}, {"nice --adjustment=5 rm x", 'D'},
	{"nice --adj 5 rm x", 'D'}, {"nice -- rm x", 'D'}, {"nice --frob rm x", 'Q'},
	{"nohup rm x", 'D'}, {"nohup -- rm x", 'D'}, {"nohup --frob rm x", 'Q'},
	{"timeout 5 rm x", 'D'}, {"timeout -s KILL 5 rm x", 'D'}, {"timeout -sKILL 5 rm x", 'D'}, {"timeout --signal=KILL 5 rm x", 'D'},
	{"timeout --signal KILL 5 rm x", 'D'}, {"timeout -k 1 -v 5 rm x", 'D'}, {"timeout --foreground 5 rm x", 'D'},
	{"timeout -- 5 rm x", 'D'}, {"timeout --frob 5 rm x", 'Q'},
	{"stdbuf -oL rm x", 'D'}, {"stdbuf -o L rm x", 'D'}, {"stdbuf --output=L rm x", 'D'}, {"stdbuf --output L rm x", 'D'},
	{"stdbuf -i0 -e0 rm x", 'D'}, {"stdbuf -x rm x", 'Q'},
	{"chroot / rm x", 'D'}, {"chroot --userspec=1:1 / rm x", 'D'}, {"chroot --userspec 1:1 / rm x", 'D'}, {"chroot /", 'Q'},
	{"doas rm x", 'D'}, {"doas -u root rm x", 'D'}, {"doas -n -u root rm x", 'D'}, {"doas -s", 'Q'}, {"doas -x rm x", 'Q'},
	{"ionice -c 3 rm x", 'D'}, {"ionice -c3 -n7 rm x", 'D'}, {"ionice --class 3 rm x", 'D'}, {"ionice -t rm x", 'D'},
	{"ionice -p 1", 'A'},
	{"command time -v rm x", 'D'}, {"/usr/bin/time -f %e rm x", 'D'}, {"/usr/bin/time --format=%e rm x", 'D'},
	{"/usr/bin/time -o out -a rm x", 'D'}, {"time -p rm x", 'D'},
	{"command rm x", 'D'}, {"command -p rm x", 'D'}, {"command -- rm x", 'D'}, {"command -v rm", 'A'}, {"command -pv rm", 'A'},
	{"command -x rm", 'Q'},
	{"exec rm x", 'D'}, {"exec -a foo rm x", 'D'}, {"exec -cl rm x", 'D'}, {"exec -afoo rm x", 'D'}, {"exec 3>&1", 'A'},
	{"builtin eval rm x", 'D'}, {"builtin command rm x", 'D'}, {"builtin -x", 'Q'},
	{"setsid rm x", 'D'}, {"setsid -f -w rm x", 'D'}, {"setsid --fork rm x", 'D'},
	{"busybox rm x", 'D'}, {"toybox rm x", 'D'}, {"busybox sh -c 'rm x'", 'D'}, {"busybox --list", 'A'},
	{"watch rm x", 'D'}, {"watch -n 1 rm x", 'D'}, {"watch -n1 -d rm x", 'D'}, {"watch -x rm x", 'D'},
	{"watch --interval=1 rm x", 'D'}, {"watch --differences rm x", 'D'}, {"watch -x sh -c 'rm x'", 'D'},
	{"/lib64/ld-linux-x86-64.so.2 /bin/rm x", 'D'}, {"/lib/ld-musl-x86_64.so.1 /bin/rm x", 'D'},
	{"ld.so --preload /tmp/x.so /bin/ls", 'Q'}, {"ld.so --list /bin/ls", 'A'},
	{"sudo nice timeout 5 stdbuf -oL rm x", 'D'},

	// Shells and source reading a descriptor, a substitution or a file.
	{"bash /dev/fd/3 3<<<'rm x'", 'Q'}, {"bash /proc/self/fd/3 3<<<'rm x'", 'Q'}, {"bash <(echo rm x)", 'Q'},
	{"sh <(echo rm x)", 'Q'}, {"source /dev/stdin <<<'rm x'", 'D'}, {". /dev/stdin <<<'rm x'", 'D'},
	{"source /dev/fd/0 <<<'rm x'", 'D'}, {"source /dev/fd/3 3<<<'rm x'", 'Q'}, {"source <(echo rm x)", 'Q'},
	{"bash -s < file", 'Q'}, {"bash < file", 'Q'}, {"bash < <(echo rm x)", 'Q'}, {"cat x | bash", 'Q'},
	{"sh script.sh", 'Q'}, {"bash ./script.sh", 'Q'}, {"echo 'rm x' > s.sh; sh s.sh", 'Q'}, {"source ./env.sh", 'Q'},
	{". ./env.sh", 'Q'}, {"bash --rcfile x -i", 'Q'}, {"bash --init-file x", 'Q'}, {"bash --frob -c ls", 'Q'},
	{"bash -c 'source /dev/fd/3' 3<<<'rm x'", 'Q'}, {"zsh script.zsh", 'Q'}, {"fish -c 'rm x'", 'Q'}, {"tcsh -c 'rm x'", 'Q'},
	{"/proc/self/exe -c 'rm x'", 'Q'}, {"/dev/fd/3 x", 'Q'}, {"bash -c 'ls'", 'A'}, {"bash -o pipefail -c ls", 'A'},
	{"bash --norc --noprofile -c ls", 'A'}, {"bash --version", 'A'},

	// Builtins that run strings.
	{"trap 'rm x' EXIT", 'D'}, {"trap -- 'rm x' EXIT", 'D'}, {"trap 'rm x' DEBUG", 'D'}, {`trap "$c" EXIT`, 'Q'},
	{"trap - EXIT", 'A'}, {"trap '' INT", 'A'}, {"trap -p", 'A'}, {"trap 'echo bye' EXIT", 'A'},
	{"mapfile -C 'rm x' -c 1 a < f", 'D'}, {"readarray -C 'rm x' a < f", 'D'}, {"mapfile -t -C'rm x' a", 'D'},
	{`mapfile -C "$cb" a`, 'Q'}, {"mapfile -t lines < f", 'A'},
	{"complete -C 'rm x' ls", 'D'}, {"compgen -C 'rm x' w", 'D'}, {"complete -W '$(rm x)' ls", 'Q'},
	{`complete -C "$c" ls`, 'Q'}, {"complete -W 'a b' ls", 'A'},
	{"PROMPT_COMMAND='rm x'", 'D'}, {"export PROMPT_COMMAND='rm x'", 'D'}, {"PROMPT_COMMAND=('rm x')", 'D'},
	{`PROMPT_COMMAND="$c"`, 'Q'}, {"PS4='$(rm x)'; set -x; ls", 'D'}, {`PS4="$p"; set -x`, 'Q'}, {"PS1='\\u$ '", 'A'},
	{"eval 'rm x'", 'D'}, {`eval "$c"`, 'Q'}, {"command_not_found_handle() { rm x; }; nosuch", 'D'},
	{`command_not_found_handle() { "$@"; }; rm2 x`, 'Q'},
	{"enable -f /tmp/x.so rm2", 'Q'}, {"hash -p /bin/rm ls; ls x", 'Q'}, {"fc -s", 'Q'}, {"bind -x '\"a\":rm x'", 'Q'},

	// Strings bash evaluates later.
	{"(( a[$(rm x)] ))", 'D'}, {"echo $(( a[$(rm x)] ))", 'D'}, {"x='a[$(rm x)]'; (( x ))", 'D'},
	{"x='a[`rm x`]'; echo $(( x ))", 'D'}, {"printf -v 'a[$(rm x)]' %s 1", 'D'}, {"printf -v \"$n\" %s 1", 'Q'},
	{"read 'a[$(rm x)]' <<< 1", 'D'}, {`read "$n" <<< 1`, 'Q'}, {"read -r -a 'a[$(rm x)]' <<< 1", 'D'},
	{"test -v 'a[$(rm x)]'", 'D'}, {"[ -v 'a[$(rm x)]' ]", 'D'}, {"[[ -v a[$(rm x)] ]]", 'D'}, {"[[ -v 'a[$(rm x)]' ]]", 'D'},
	{`test -v "$n"`, 'Q'}, {`[[ -v $n ]]`, 'Q'},
	{"declare 'a[$(rm x)]=1'", 'D'}, {"local 'a[$(rm x)]'", 'D'}, {"typeset 'a[$(rm x)]=1'", 'D'},
	{"export 'a[$(rm x)]=1'", 'D'}, {"readonly 'a[$(rm x)]=1'", 'D'}, {`declare "$n"=1`, 'Q'}, {`declare "$n"`, 'Q'},
	{"declare -i x; x='a[$(rm x)]'", 'D'}, {"declare -n r='a[$(rm x)]'; echo $r", 'D'}, {`declare -n r="$n"`, 'Q'},
	{"declare -n r=PATH; r=/tmp; ls", 'Q'}, {"unset 'a[$(rm x)]'", 'D'}, {`unset "$n"`, 'Q'},
	{"getopts a: 'o[$(rm x)]'", 'D'}, {"wait -p 'a[$(rm x)]'", 'D'}, {"let 'a[$(rm x)]'", 'D'}, {"let a[$(rm x)]++", 'D'},
	{"let 'x=a[`rm x`]'", 'D'}, {`let "$e"`, 'Q'}, {"let i=$j+1", 'Q'}, {"let i=i+1", 'A'}, {"let 'a[1]++' b[2]=3", 'A'}, {"echo ${x@P}", 'Q'}, {"p='$(rm x)'; echo ${p@P}", 'Q'}, {"echo ${!x}", 'Q'},
	{"x='a[$(rm x)]'; echo ${!x}", 'D'}, {"echo ${!x[@]} ${!pre*}", 'A'}, {"builtin printf -v \"$n\" x", 'Q'},
	{`local "x=$1"`, 'A'}, {"declare -A m=([k]=v)", 'A'}, {"printf -v out %s 1", 'A'}, {"read -r line < f", 'A'},
	{"(( i++ ))", 'A'}, {"echo $(( 1 + 2 ))", 'A'}, {"a[1]=2", 'A'}, {"echo 'see a[i] and $(cmd)'", 'A'},

	// Environment set in an earlier statement (or anywhere).
	{"export BASH_ENV=/tmp/x; bash -c true", 'Q'}, {"BASH_ENV=/tmp/x; export BASH_ENV; bash -c true", 'Q'},
	{"export PATH=/tmp:$PATH; ls", 'Q'}, {"PATH=/tmp; ls", 'Q'}, {"declare -x PATH=/tmp; ls", 'Q'},
	{"export ENV=/tmp/x; sh -i", 'Q'}, {"export SHELLOPTS=xtrace", 'Q'}, {"export BASHOPTS=x", 'Q'},
	{"export LD_PRELOAD=/tmp/x.so; ls", 'Q'}, {"export LD_LIBRARY_PATH=/tmp; ls", 'Q'}, {"IFS=/; ls", 'Q'},
	{"read PATH < f; ls", 'Q'}, {"printf -v PATH /tmp; ls", 'Q'}, {"for PATH in /tmp; do ls; done", 'Q'},
	{"export GIT_SSH_COMMAND='rm x'; git fetch", 'D'}, {`export GIT_SSH_COMMAND="$c"; git fetch`, 'Q'},
	{"export GIT_PAGER=cat; git log", 'A'}, {"GIT_PAGER='rm x' git log", 'D'}, {"export GIT_CONFIG_PARAMETERS=x", 'Q'},
	{"export GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.pager GIT_CONFIG_VALUE_0='rm x'; git log", 'Q'},
	{"export EDITOR='rm x'; git commit", 'D'}, {"export PAGER=less; man ls", 'A'}, {"export TAR_OPTIONS=--to-command=x", 'Q'},
	{"export NODE_OPTIONS='--require /tmp/x.js'", 'Q'}, {"export PYTHONSTARTUP=/tmp/x", 'Q'},
	{"export SHELL=/tmp/x; script -c ls", 'Q'}, {"export SHELL=/bin/bash", 'A'}, {"export BASH_FUNC_ls%%='() { rm x; }'", 'Q'},
	{"alias rm2=rm; rm2 x", 'D'}, {"shopt -s expand_aliases; alias r=rm; r x", 'D'}, {`alias r="$c"`, 'Q'},
	{"export CI=1 GOFLAGS=-mod=mod; go test ./...", 'A'}, {"X=1; echo $X", 'A'}, {"export PATH", 'A'},

	// Commands that run commands: unwrapped when literal and certain.
	{"flock /tmp/l rm x", 'D'}, {"flock -n /tmp/l rm x", 'D'}, {"flock -w 5 /tmp/l rm x", 'D'}, {"flock -w5 /tmp/l rm x", 'D'},
	{"flock --timeout=5 /tmp/l rm x", 'D'}, {"flock /tmp/l -c 'rm x'", 'D'}, {"flock /tmp/l --command 'rm x'", 'D'},
	{"flock --frob /tmp/l rm x", 'Q'}, {"flock 9", 'A'},
	{"script -c 'rm x' /dev/null", 'D'}, {"script -q -c 'rm x'", 'D'}, {"script /dev/null -c 'rm x'", 'D'},
	{"script --command='rm x'", 'D'}, {"script --comm 'rm x'", 'D'}, {"script -qc 'rm x'", 'D'}, {"script", 'Q'},
	{"script --frob", 'Q'},
	{"taskset 1 rm x", 'D'}, {"taskset -c 0 rm x", 'D'}, {"taskset -a 1 rm x", 'D'}, {"taskset -p 1 2", 'A'},
	{"setpriv --reuid 1 rm x", 'D'}, {"setpriv --nnp rm x", 'D'}, {"setpriv --reuid=1 --clear-groups rm x", 'D'},
	{"setpriv --frob rm x", 'Q'},
	{"setarch x86_64 rm x", 'D'}, {"setarch x86_64 -R rm x", 'D'}, {"linux32 rm x", 'D'}, {"setarch x86_64", 'Q'},
	{"unshare -r rm x", 'D'}, {"unshare -mU --map-root-user rm x", 'D'}, {"unshare --mount=/x rm x", 'D'},
	{"unshare -S 0 rm x", 'D'}, {"unshare", 'Q'}, {"unshare -r", 'Q'},
	{"nsenter -t 1 -m rm x", 'D'}, {"nsenter --target=1 --mount rm x", 'D'}, {"nsenter -t 1", 'Q'},
	{"chrt 1 rm x", 'D'}, {"chrt -f 1 rm x", 'D'}, {"chrt -p 1 2", 'A'}, {"chrt -m", 'A'},
	{"prlimit --nofile=10 rm x", 'D'}, {"prlimit -n10 rm x", 'D'}, {"prlimit --nofile 10 rm x", 'A'}, {"prlimit -p 1", 'A'},
	{"fakeroot rm x", 'D'}, {"fakeroot -- rm x", 'D'}, {"fakeroot -l /tmp/x.so ls", 'Q'},
	{"pkexec rm x", 'D'}, {"pkexec --user root rm x", 'D'}, {"sshpass -p pw rm x", 'D'},
	{"strace rm x", 'D'}, {"strace -f -e trace=file rm x", 'D'}, {"strace -o '|rm x' ls", 'Q'}, {"ltrace rm x", 'D'},
	{"gosu root rm x", 'D'}, {"su-exec root rm x", 'D'}, {"eatmydata rm x", 'D'}, {"dbus-run-session -- rm x", 'D'},
	{"su -c 'rm x'", 'D'}, {"su root -c 'rm x'", 'D'}, {"su -c 'rm x' root", 'D'}, {"su --command='rm x'", 'D'},
	{"su --session-command='rm x'", 'D'}, {"su -s /tmp/sh -c ls", 'Q'}, {"su -", 'Q'},
	{"runuser -u root rm x", 'D'}, {"runuser -u root -- rm x", 'D'}, {"runuser -l root -c 'rm x'", 'D'},
	{"sg wheel 'rm x'", 'D'}, {"sg wheel -c 'rm x'", 'D'},
	{"sed 's/x/rm x/e' f", 'Q'}, {"sed -n '1e rm x' f", 'Q'}, {"sed -e 'e' f", 'Q'}, {"sed 's/a/b/;e' f", 'Q'},
	{"sed -E 's/(.*)/\\1/gie' f", 'Q'}, {"sed -f script.sed f", 'Q'}, {"sed --file=x f", 'Q'}, {`sed "$s" f`, 'Q'},
	{"sed -ne 's/x/y/ep' f", 'Q'}, {"sed 's/a/b/' f", 'A'}, {"sed -i 's/a/b/g' f", 'A'}, {"sed -ie 's/a/b/' f", 'A'},
	{"sed -n '/start/,/end/p' f", 'A'}, {"sed '1d;$d' f", 'A'}, {"sed 'y/abc/xyz/' f", 'A'}, {"sed '/x/a hello' f", 'A'},
	{"sed 's|/usr|/opt|w out.txt' f", 'A'}, {"sed --sandbox 's/x/y/e' f", 'A'},
	{"tar xf a.tar --to-command='rm x'", 'D'}, {"tar xf a.tar --to-command 'rm x'", 'D'}, {"tar xf a.tar --to-c='rm x'", 'D'},
	{"tar -xf a --checkpoint-action=exec='rm x'", 'D'}, {"tar -xf a --checkpoint-action exec='rm x'", 'D'},
	{"tar -I 'rm x' -xf a", 'Q'}, {"tar -xIf 'rm x' a", 'Q'}, {"tar xIf 'rm x' a", 'Q'},
	{"tar --use-compress-program='rm x' -xf a", 'D'}, {"tar --rsh-command='rm x' -xf h:a", 'D'},
	{"tar -F 'rm x' -xf a", 'Q'}, {"tar --info-script='rm x' -xf a", 'D'}, {`tar --to-command="$c" -xf a`, 'Q'},
	{"tar -czf out.tgz dir", 'A'}, {"tar --use-compress-program=zstd -cf a.tzst d", 'A'},
	{"split --filter='rm x' f", 'D'}, {"split --filter 'rm x' f", 'D'}, {"split --fil='rm x' f", 'D'}, {"split -l 10 f", 'A'},
	{"git -c core.pager='rm x' log", 'Q'}, {"git -c core.sshCommand='rm x' fetch", 'Q'}, {"git -c alias.x='!rm x' x", 'Q'},
	{"git -ccore.pager=x log", 'Q'}, {"git --exec-path=/tmp status", 'Q'}, {"git --config-env=core.pager=X log", 'Q'},
	{"git config alias.x '!rm x'", 'Q'}, {"git config core.pager 'rm x'", 'Q'}, {"git config --global core.hooksPath /tmp", 'Q'},
	{"git submodule foreach 'rm x'", 'D'}, {"git submodule foreach --recursive 'rm x'", 'D'},
	{"git rebase --exec 'rm x' main", 'D'}, {"git rebase -x 'rm x' main", 'D'}, {"git bisect run rm x", 'D'},
	{"git filter-branch --tree-filter 'rm x'", 'Q'}, {"git difftool -x 'rm x'", 'Q'}, {"git grep -O'rm x' y", 'Q'},
	{"git ls-remote --upload-pack='rm x' h", 'Q'}, {"git clone -u 'rm x' h", 'Q'}, {"git clone ext::'rm x' d", 'Q'},
	{"git -c user.name=x commit -m y", 'A'}, {"git -C sub status", 'A'}, {"git config user.email a@b", 'A'},
	{"git config --get core.pager", 'A'}, {"git --no-pager log", 'A'}, {"git --exec-path", 'A'},
	{"less '+!rm x' f", 'Q'}, {"less +F f", 'A'}, {"less -k keys f", 'Q'}, {"man -P 'rm x' ls", 'Q'}, {"man --pager='rm x' ls", 'Q'},
	{"man -H ls", 'Q'}, {"man ls", 'A'}, {"less f", 'A'},
	{"tmux new-session -d 'rm x'", 'Q'}, {"tmux new -d 'rm x'", 'Q'}, {"tmux send-keys 'rm x' Enter", 'Q'},
	{"tmux run-shell 'rm x'", 'Q'}, {"tmux ls", 'A'}, {"tmux kill-server", 'A'}, {"tmux ls \\; new 'rm x'", 'Q'},
	{"tmux -c 'rm x'", 'Q'}, {"screen -dm rm x", 'Q'}, {"screen -S s -X stuff 'rm x'", 'Q'}, {"screen -ls", 'A'},
	{"ssh -o ProxyCommand='rm x' h", 'Q'}, {"ssh -oProxyCommand='rm x' h", 'Q'}, {"ssh -o 'ProxyCommand rm x' h", 'Q'},
	{"ssh -o proxycommand=x h", 'Q'}, {"ssh -o LocalCommand='rm x' -o PermitLocalCommand=yes h", 'Q'},
	{"ssh -F cfg h", 'Q'}, {"ssh -I lib.so h", 'Q'}, {"scp -S 'rm x' a h:b", 'Q'}, {"sftp -D 'rm x' h", 'Q'},
	{"ssh -p 22 h ls", 'A'}, {"ssh h 'rm x'", 'D'}, {"ssh -p 22 -t h rm x", 'D'}, {`ssh h "$c"`, 'Q'},
	{"ssh -Z h", 'Q'}, {"time -p -- rm x", 'D'}, {"time -- rm x", 'D'}, {"while IFS= read -r l; do echo \"$l\"; done < f", 'A'},
	{"IFS=: ls", 'Q'}, {"GIT_PAGER=cat git log", 'A'}, {"GIT_PAGER=$x git log", 'Q'}, {"rsync -e 'rm x' a h:b", 'Q'}, {"rsync --rsh='rm x' a h:b", 'Q'}, {"rsync -avz a b", 'A'},
	{"gdb -ex 'shell rm x'", 'Q'}, {"gdb --batch -x cmds ./a.out", 'Q'}, {"perf record rm x", 'Q'}, {"valgrind rm x", 'Q'},
	{"parallel rm ::: x", 'Q'}, {"parallel --version", 'A'}, {"systemd-run rm x", 'Q'}, {"bwrap --bind / / rm x", 'Q'},
	{"firejail rm x", 'Q'}, {"capsh -- -c 'rm x'", 'Q'}, {"at now <<< 'rm x'", 'Q'}, {"batch <<< 'rm x'", 'Q'},
	{"run-parts /etc/x", 'Q'}, {"pee 'rm x'", 'Q'}, {"faketime 0 rm x", 'Q'}, {"docker run img rm x", 'Q'},
	{"awk 'BEGIN{system(\"rm x\")}'", 'Q'}, {"awk '{print | \"rm x\"}' f", 'Q'}, {"awk 'BEGIN{\"rm x\" | getline}'", 'Q'},
	{"gawk '@load \"x\"'", 'Q'}, {"awk -f prog.awk f", 'Q'}, {"awk -fprog.awk f", 'Q'}, {"gawk -E prog f", 'Q'},
	{"awk -e 'BEGIN{system(\"rm x\")}'", 'Q'}, {`awk "$p" f`, 'Q'}, {"mawk -W exec prog f", 'Q'},
	{"awk -F: '{print $1}' f", 'A'}, {"awk -v n=1 'NR==n' f", 'A'}, {"gawk -i inplace '{print}' f", 'A'},
	{"find . -exec rm {} +", 'D'}, {"find . -execdir rm {} \\;", 'D'}, {"find . -ok rm {} \\;", 'D'},
	{"find . -okdir rm {} \\;", 'D'}, {"find . -exec sh -c 'rm \"$1\"' _ {} \\;", 'D'}, {"find . -exec {} \\;", 'Q'},
	{"find . -name x -print", 'A'},
	{"sort --compress-program='rm x' f", 'D'}, {"sort --compress-p=rm f", 'D'}, {"sort -u f", 'A'},
	{"zip -T -TT 'rm x' a.zip f", 'D'}, {"zip --unzip-command='rm x' -T a.zip f", 'D'}, {"zip -r a.zip d", 'A'},
	{"wget --use-askpass='rm x' u", 'D'}, {"pandoc --filter ./f in.md", 'Q'}, {"pandoc -F ./f in.md", 'Q'},
	{"pandoc -o out.pdf in.md", 'A'}, {"pdflatex -shell-escape doc.tex", 'Q'}, {"pdflatex doc.tex", 'A'},
	{"fzf --preview 'rm x'", 'Q'}, {"sqlite3 db '.shell rm x'", 'Q'}, {"sqlite3 db '.system rm x'", 'Q'},
	{"sqlite3 db 'select 1'", 'A'}, {`psql -c '\! rm x'`, 'Q'}, {"mysql -e 'system rm x'", 'Q'},
	{"mlr -n put 'end{system(\"rm x\")}'", 'Q'}, {"gs -sOutputFile='%pipe%rm x' f.ps", 'Q'},
	{`printf -v"$n" x`, 'Q'}, {`read -a"$n"`, 'Q'}, {"declare -n r; r=PATH; r=/tmp; ls", 'Q'},
	{"shopt -s expand_aliases; BASH_ALIASES[ll]=rm; ll x", 'D'}, {"BASH_CMDS[ls]=/bin/rm; ls x", 'Q'},
	{"CC='rm x' go build", 'D'}, {"CC=gcc go build", 'A'}, {"export GOFLAGS=-toolexec=/tmp/x; go build", 'Q'},
	{"GOFLAGS=-mod=mod go test ./...", 'A'}, {"go build -toolexec 'rm x' .", 'Q'}, {"go test -exec 'rm x' .", 'Q'},
	{"go vet -vettool=/tmp/x .", 'Q'}, {"go generate ./...", 'Q'}, {"go test -run X ./...", 'A'},
	{"fd . -x rm", 'D'}, {"fd -e o --exec rm {}", 'D'}, {"fdfind -X rm", 'D'}, {"fd . -x {}", 'Q'}, {"fd -e go", 'A'},
	{"rg --pre 'rm x' y", 'D'}, {"rg --pre=rm y", 'D'}, {"rg -n TODO", 'A'}, {"sdiff --diff-program=rm a b", 'D'},
	{"hyperfine 'rm x'", 'Q'}, {"socat EXEC:'rm x' -", 'Q'}, {"socat - SYSTEM:'rm x'", 'Q'}, {"socat - TCP:h:1", 'A'},
	{"nc -e /bin/rm h 1", 'Q'}, {"ncat --sh-exec 'rm x' -l 1", 'Q'}, {"nc -l 1", 'A'},
	{"jobs -x rm x", 'D'}, {"newgrp g", 'Q'}, {"poetry run rm x", 'D'}, {"uv run -- rm x", 'D'},
	{"bundle exec rm x", 'D'}, {"conda run -n e rm x", 'Q'}, {"pyenv exec rm x", 'D'}, {"npm exec rimraf x", 'Q'},
	{"npx rimraf x", 'Q'}, {"poetry install", 'A'}, {"npm test", 'A'}, {"rr record rm x", 'Q'}, {"hg --config x=y log", 'Q'}, {"hg status", 'A'}, {"svn --diff-cmd 'rm x' diff", 'Q'},
	// Interpreters, make: code the command does not show.
	{"python3 -c 'import os; os.remove(\"x\")'", 'Q'}, {"python3 x.py", 'Q'}, {"python3.12 x.py", 'Q'},
	{"perl -e 'unlink \"x\"'", 'Q'}, {"ruby -e 'File.delete(\"x\")'", 'Q'}, {"node -e 'require(\"fs\").rmSync(\"x\")'", 'Q'},
	{"php -r 'unlink(\"x\");'", 'Q'}, {"lua -e 'os.remove(\"x\")'", 'Q'}, {"make", 'Q'}, {"make -f /dev/stdin <<< x", 'Q'},
	{"dc -e '!rm x'", 'Q'}, {"m4 <<< 'esyscmd(rm x)'", 'Q'}, {"vim -c '!rm x' f", 'Q'}, {"ed f <<< '!rm x'", 'Q'},
	{"env python3 x.py", 'Q'}, {"sudo python3 x.py", 'Q'},
	{"python3 --version", 'A'}, {"node -v", 'A'}, {"python3 -m pytest -q", 'A'},
	// Here-documents after their quoting layer: unquoted, \\ \$ \` and
	// backslash-newline are the shell's before the script is read.
	{"bash <<EOF\nr\\\\m x\nEOF", 'D'}, {"bash <<EOF\necho \\$(rm x)\nEOF", 'D'}, {"sh <<EOF\necho \\`rm x\\`\nEOF", 'D'},
	{"bash <<-EOF\n\tr\\\\m x\n\tEOF", 'D'}, {"bash <<EOF\nr\\\nm x\nEOF", 'D'}, {"source /dev/stdin <<EOF\nr\\\\m x\nEOF", 'D'},
	{"bash <<'EOF'\necho \\$(rm x)\nEOF", 'Q'}, {"bash <<E\\OF\necho \\`rm x\\`\nEOF", 'A'}, {"bash <<\"EOF\"\nr\\\\m x\nEOF", 'A'},
	// Brace and glob patterns judged on the whole word, quoted parts inert.
	{"{r''m,x}", 'Q'}, {`{r""m,x} y`, 'Q'}, {"{{r,}m,x} y", 'Q'}, {"r{''m,} y", 'Q'}, {"r{m..m} x", 'Q'},
	{"bash -c {'rm x',}", 'Q'}, {"env {r''m,x} y", 'Q'}, {"[''r]m x", 'Q'}, {"/usr/bin/r''[m] x", 'Q'},
	{"\\{rm,x}", 'A'}, {"'{rm,x}'", 'A'}, {"echo {a,b}", 'A'}, {"mkdir -p src/{a,b}", 'A'},
	// Tilde expansion: HOME, OLDPWD and PWD may be set by an earlier statement.
	{"HOME=/usr/bin/rm; ~ x", 'Q'}, {"OLDPWD=/usr/bin/rm; ~- x", 'Q'}, {"PWD=/usr/bin/rm; ~+ x", 'Q'}, {"~root x", 'Q'},
	{"~/ x", 'Q'}, {"env ~ x", 'Q'}, {"bash -c ~", 'Q'}, {"eval ~", 'Q'}, {"GIT_PAGER=a:~ git log", 'Q'},
	{"export GIT_PAGER=~; git log", 'Q'}, {"HOME=/usr/bin; ~/rm -f x", 'D'}, {`~"/rm" x`, 'D'},
	{"~/.local/bin/tool x", 'A'}, {`"~" x`, 'A'}, {"\\~ x", 'A'}, {"cp ~/a ~/b", 'A'}, {"cd ~/src && ls", 'A'},
	// sh and dash scripts in the POSIX grammar ($'…' is $ and a quoted
	// string, ((…)) two subshells); sh's in bash's too, as sh may be bash.
	{"dash -c \"echo \\$'\\\\'; rm x\n#'\"", 'D'}, {"sh -c \"echo \\$'\\\\'; rm x\n#'\"", 'D'},
	{"dash <<'EOF'\necho $'\\'; rm x\n#'\nEOF", 'D'}, {"dash -c '((rm x) )'", 'D'}, {"dash -c '((rm x))'", 'D'},
	{"find . -exec dash -c '((rm x) )' \\;", 'D'}, {"sh -c '((rm x))'", 'Q'}, {"export GIT_PAGER=\"echo \\$'\\\\'; rm x\n#'\"; git log", 'D'},
	{"bash -c \"echo \\$'\\\\'; rm x\n#'\"", 'A'}, {"sh -c 'for i in 1 2; do echo $i; done'", 'A'}, {"dash -c \"\\$'rm' x\"", 'A'},
	// Values built at run time and evaluated as arithmetic are dynamic.
	{"printf -v a 'x[$(r%s y)]' m; (( a ))", 'Q'}, {`b='$(rm y)'; a="x[$b]"; (( a ))`, 'Q'}, {"a=$'x[$(rm y)]'; (( a ))", 'Q'},
	{"a=$'x[$(rm y)]'; echo $(( a + 1 ))", 'Q'}, {"a=$'x[$(rm y)]'; [[ $a -eq 1 ]]", 'Q'}, {"a=$'x[$(rm y)]'; echo ${arr[a]}", 'Q'},
	{"a=$'x[$(rm y)]'; echo ${s:a}", 'Q'}, {"a=$'x[$(rm y)]'; let a", 'Q'}, {"a=$'x[$(rm y)]'; for ((i=0; i<a; i++)); do :; done", 'Q'},
	{"declare -i n; n=$'x[$(rm y)]'", 'Q'}, {"declare a=$'x[$(rm y)]'; (( a ))", 'Q'}, {"read -r a < f; (( a ))", 'Q'},
	{"a=$(cat f); (( a ))", 'Q'}, {"for a in $(cat f); do (( a )); done", 'Q'}, {"arr=($'x[$(rm y)]'); (( arr ))", 'Q'},
	{"a=$'x[$(rm y)]'; b[a]=1", 'Q'}, {"a=x; a+='[$(rm y)]'; (( a ))", 'D'},
	{"i=0; i=$((i+1)); (( i < 3 ))", 'A'}, {"n=${#arr[@]}; (( n > 0 ))", 'A'}, {"read -r line < f; echo \"$line\"", 'A'},
	// Runners and hook options by every spelling their program accepts.
	{"git push --receive='rm x' /tmp/r", 'Q'}, {"git push --exe='rm x' /tmp/r", 'Q'}, {"git fetch --uplo='rm x' r", 'Q'},
	{"git clone -qu 'rm x' h d", 'Q'}, {"git clone -u'rm x' h d", 'Q'}, {"git ls-remote -u 'rm x' h", 'Q'},
	{"SELECTED_EDITOR='rm x' sensible-editor f", 'D'}, {"sensible-editor f", 'Q'}, {"editor f", 'Q'},
	{"fstab-decode rm x", 'D'}, {"fstab-decode 'r\\155' x", 'Q'}, {"fstab-decode ls", 'A'},
	{"git push -u origin main", 'A'}, {"git format-patch --to=a@b HEAD~1", 'A'}, {"git push --tags", 'A'},
	// Beyond any reader: renamed binaries (the sandbox is the boundary).
	{"cp /bin/rm x; ./x y", 'A'},
}

// A command that acts itself and also runs a command (tar --to-command, git
// submodule foreach, sed with e) still takes the default when no rule
// matches it; a pure wrapper (env, nice, flock) does not.
func TestActingRunnersTakeTheDefault(t *testing.T) {
	p, err := Parse("/p/strict.yaml", []byte(`default: deny
unparseable: ask
rules:
  - {name: cat, decision: allow, match: {command: [cat, ls, echo]}}
`))
	if err != nil {
		t.Fatal(err)
	}
	for cmd, want := range map[string]Decision{
		"tar --to-command=cat -xf a":    Deny,
		"git submodule foreach ls":      Deny,
		"sort --compress-program=cat f": Deny,
		"ssh h ls":                      Deny,
		"tar -I cat -xf a":              Deny,
		"sed 's/a/b/e' f":               Deny,
		"nice ls":                       Allow,
		"flock /tmp/l ls":               Allow,
		"env -vS ls":                    Allow,
		"trap 'echo bye' EXIT":          Allow,
		"python3 x.py":                  Deny, // the default, stricter than unparseable here
	} {
		if v := p.evaluate(call{tool: "bash", command: cmd}); v.Decision != want {
			t.Errorf("%q = %s (rule %s: %s), want %s", cmd, v.Decision, v.Rule, v.Reason, want)
		}
	}
}

func TestBypassClasses(t *testing.T) {
	p, err := Parse("/p/bypass.yaml", []byte(bypassPolicy))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, c := range bypassCases {
		if seen[c.cmd] {
			t.Errorf("%q listed twice", c.cmd)
		}
		seen[c.cmd] = true
		v := p.evaluate(call{tool: "bash", command: c.cmd})
		var ok bool
		switch c.want {
		case 'D':
			ok = v.Decision == Deny && v.Rule == "no-rm"
		case 'Q':
			ok = v.Decision == Ask && (v.Rule == RuleDynamic || v.Rule == RuleUnparseable || v.Rule == RuleOpaque)
		case 'A':
			ok = v.Decision == Allow
		}
		if !ok {
			t.Errorf("%q = %s (rule %s: %s; command %q), want %c", c.cmd, v.Decision, v.Rule, v.Reason, v.Command, c.want)
		}
	}
}

// Every wrapper of the tables runs rm where rm stands, and none is allowed
// with an option it does not know; every job runner and interpreter is
// never allowed by the default.
func TestEveryWrapperSeesRm(t *testing.T) {
	p, err := Parse("/p/bypass.yaml", []byte(bypassPolicy))
	if err != nil {
		t.Fatal(err)
	}
	check := func(cmd string, deny bool) {
		t.Helper()
		v := p.evaluate(call{tool: "bash", command: cmd})
		switch {
		case v.Decision == Allow:
			t.Errorf("%q = allow (rule %s: %s)", cmd, v.Rule, v.Reason)
		case deny && v.Rule != "no-rm":
			t.Errorf("%q = %s (rule %s: %s), want no-rm", cmd, v.Decision, v.Rule, v.Reason)
		}
	}
	for name, w := range argvWrappers {
		if name == "time" {
			name = "/usr/bin/time" // time alone is bash's keyword
		}
		ops := strings.Repeat("1 ", w.lead+w.skip)
		lead := strings.Repeat("1 ", w.lead)
		check(name+" "+ops+"rm x", true)
		check(name+" "+lead+"--frobnicate "+strings.Repeat("1 ", w.skip)+"rm x", false)
		check(name+" "+lead+"-Z9 "+strings.Repeat("1 ", w.skip)+"rm x", false)
	}
	for name := range runsAnything {
		check(name+" rm x", false)
	}
	for name := range interpreters {
		check(name+" x", false)
	}
	for name := range makers {
		check(name, false)
	}
}

// spellingPolicy names options the way policies do; an ask or deny rule
// sees every spelling GNU getopt_long and git's parse-options accept for
// them, an allow rule only the words as written.
const spellingPolicy = `default: allow
unparseable: ask
rules:
  - {name: no-force, decision: deny, match: {prefix: ["git push --force"]}}
  - {name: no-force-arg, decision: deny, match: {command: [git], args: ["--force*"]}}
  - {name: no-recursive, decision: deny, match: {command: [rm], args: ["-r*", "--recursive"]}}
  - {name: no-verify, decision: ask, match: {prefix: ["git commit"], args: ["--no-verify", "-n"]}}
  - {name: no-exec-path, decision: deny, match: {command: [git], argsRegex: ['^--exec-path$']}}
`

func TestOptionSpellings(t *testing.T) {
	p, err := Parse("/p/spelling.yaml", []byte(spellingPolicy))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cmd, rule string
		want      Decision
	}{
		{"git push --forc", "no-force", Deny}, {"git push --force", "no-force", Deny},
		{"git -C /x push --force", "no-force", Deny}, {"git --no-pager push --forc", "no-force", Deny},
		{"git -c a=b push --force origin", "no-force", Deny}, {"git tag --forc v1", "no-force-arg", Deny},
		{"git tag --force=1 v1", "no-force-arg", Deny},
		{"rm -fr x", "no-recursive", Deny}, {"rm -f -r x", "no-recursive", Deny}, {"rm -rf x", "no-recursive", Deny},
		{"rm --recur x", "no-recursive", Deny}, {"rm -vfR x", "default", Allow}, {"rm -f x", "default", Allow},
		{"git commit --no-verif -m x", "no-verify", Ask}, {"git commit --no-v -m x", "no-verify", Ask},
		{"git commit -anm x", "no-verify", Ask}, {"git commit -am x", "default", Allow},
		{"git --exec-path=/tmp/x version", "no-exec-path", Deny}, {"git --exec-pa", "no-exec-path", Deny},
		{"git push origin main", "default", Allow}, {"git push --follow-tags", "default", Allow},
		{"git fetch --force-w", "no-force-arg", Deny},
	} {
		v := p.evaluate(call{tool: "bash", command: c.cmd})
		if v.Decision != c.want || v.Rule != c.rule {
			t.Errorf("%q = %s (rule %s: %s), want %s by %s", c.cmd, v.Decision, v.Rule, v.Reason, c.want, c.rule)
		}
	}
	// An allow rule matches as written: --force is a prefix of
	// --force-with-lease, but not an abbreviation of it.
	a, err := Parse("/p/allow.yaml", []byte(`default: ask
rules:
  - {name: lease, decision: allow, match: {prefix: ["git push --force-with-lease"], args: ["--force-with-lease"]}}
`))
	if err != nil {
		t.Fatal(err)
	}
	for cmd, want := range map[string]Decision{"git push --force-with-lease": Allow, "git push --force": Ask,
		"git push --force-w": Ask, "git -C x push --force-with-lease": Ask} {
		if v := a.evaluate(call{tool: "bash", command: cmd}); v.Decision != want {
			t.Errorf("%q = %s (rule %s), want %s", cmd, v.Decision, v.Rule, want)
		}
	}
}

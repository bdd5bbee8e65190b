# The per-call Landlock shim for linux/amd64 (GNU as). The bytes of .text
# are the program of ../shim_amd64.go; TestShimSource assembles this file
# and compares.
#
#	shim PATH ARGV0 [ARG...]
#
# enters a new Landlock domain and execs PATH with ARGV0 [ARG...] and the
# shim's environment; fd 3 (the shim itself, run as /proc/self/fd/3) is
# closed first. A failure writes one line to stderr and exits 126, or 127
# when PATH does not exist.

	.intel_syntax noprefix
	.text
	.globl	_start
_start:
	mov	rbx, rsp		# &argc; system calls keep rbx, rbp, r12-r15
	cmp	qword ptr [rbx], 3
	jb	usage
	sub	rsp, 16			# ruleset attr, then path-beneath attr
	mov	qword ptr [rsp], 0x2000	# LANDLOCK_ACCESS_FS_REFER

	# prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
	mov	eax, 157
	mov	edi, 38
	mov	esi, 1
	xor	edx, edx
	xor	r10d, r10d
	xor	r8d, r8d
	syscall
	lea	rbp, [rip + m_prctl]
	test	rax, rax
	jnz	setup_failed

	# landlock_create_ruleset(&{handled_access_fs: REFER}, 8, 0)
	mov	rdi, rsp
	mov	esi, 8
	xor	edx, edx
	mov	eax, 444
	syscall
	lea	rbp, [rip + m_create]
	test	rax, rax
	js	setup_failed
	mov	r12, rax		# the ruleset

	# openat(AT_FDCWD, "/", O_PATH|O_DIRECTORY|O_CLOEXEC)
	mov	edi, -100
	lea	rsi, [rip + m_root]
	mov	edx, 0x290000
	mov	eax, 257
	syscall
	lea	rbp, [rip + m_open]
	test	rax, rax
	js	setup_failed
	mov	r13, rax		# "/"

	# landlock_add_rule(ruleset, LANDLOCK_RULE_PATH_BENEATH,
	#	&{allowed_access: REFER, parent_fd: "/"}, 0)  (packed, 12 bytes)
	mov	dword ptr [rsp + 8], r13d
	mov	rdi, r12
	mov	esi, 1
	mov	rdx, rsp
	xor	r10d, r10d
	mov	eax, 445
	syscall
	lea	rbp, [rip + m_rule]
	test	rax, rax
	jnz	setup_failed

	# close("/")
	mov	rdi, r13
	mov	eax, 3
	syscall

	# landlock_restrict_self(ruleset, 0)
	mov	rdi, r12
	xor	esi, esi
	mov	eax, 446
	syscall
	lea	rbp, [rip + m_restrict]
	test	rax, rax
	jnz	setup_failed

	# close(ruleset); close(3)
	mov	rdi, r12
	mov	eax, 3
	syscall
	mov	edi, 3
	mov	eax, 3
	syscall

	# execve(argv[1], &argv[2], envp)
	mov	rdi, [rbx + 16]
	lea	rsi, [rbx + 24]
	mov	rax, [rbx]
	lea	rdx, [rbx + rax*8 + 16]	# envp: past argv's NULL
	mov	eax, 59
	syscall

	# execve failed: "shellbox-landlock: execve PATH: errno N", exit
	# 127 for ENOENT, else 126
	neg	rax
	mov	r14, rax
	mov	r15d, 126
	cmp	eax, 2
	jne	1f
	mov	r15d, 127
1:	lea	rsi, [rip + m_exec]
	call	put
	mov	rsi, [rbx + 16]
	call	put
	jmp	errno_exit

	# rbp: the step's name; rax: -errno
setup_failed:
	neg	rax
	mov	r14, rax
	mov	r15d, 126
	lea	rsi, [rip + m_prefix]
	call	put
	mov	rsi, rbp
	call	put

	# ": errno N\n", then exit_group(r15)
errno_exit:
	lea	rsi, [rip + m_errno]
	call	put
	mov	eax, r14d
	mov	word ptr [rsp + 14], 10	# "\n\0" at the end of the attrs (done with)
	lea	rsi, [rsp + 14]
	mov	ecx, 10
2:	xor	edx, edx
	div	ecx
	add	dl, 0x30
	dec	rsi
	mov	byte ptr [rsi], dl
	test	eax, eax
	jnz	2b
	call	put
	mov	edi, r15d
	mov	eax, 231
	syscall

usage:
	lea	rsi, [rip + m_usage]
	call	put
	mov	edi, 126
	mov	eax, 231
	syscall

	# put writes the NUL-terminated string at rsi to stderr.
put:
	xor	edx, edx
3:	cmp	byte ptr [rsi + rdx], 0
	je	4f
	inc	rdx
	jmp	3b
4:	mov	edi, 2
	mov	eax, 1
	syscall
	ret

m_root:		.asciz	"/"
m_prefix:	.asciz	"shellbox-landlock: "
m_prctl:	.asciz	"prctl(PR_SET_NO_NEW_PRIVS)"
m_create:	.asciz	"landlock_create_ruleset"
m_open:		.asciz	"open /"
m_rule:		.asciz	"landlock_add_rule"
m_restrict:	.asciz	"landlock_restrict_self"
m_exec:		.asciz	"shellbox-landlock: execve "
m_errno:	.asciz	": errno "
m_usage:	.asciz	"shellbox-landlock: usage: shellbox-landlock PATH ARGV0 [ARG...]\n"

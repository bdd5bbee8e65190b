// threads starts a thread with pthread_create and joins it, and prints what
// clone3 returns for a size of 0 (EINVAL where the kernel sees it, ENOSYS
// where a filter answers for it). Built static by TestDockerThreads with the
// host's gcc (the one cgo and -race use).
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_clone3
#define SYS_clone3 435
#endif

static void *run(void *arg) { return arg; }

int main(void) {
	long r = syscall(SYS_clone3, NULL, 0);
	printf("clone3: %s\n", r == -1 ? strerrorname_np(errno) : "ok");
	pthread_t t;
	int e = pthread_create(&t, NULL, run, NULL);
	if (e != 0) {
		printf("pthread_create: %s\n", strerrorname_np(e));
		return 1;
	}
	pthread_join(t, NULL);
	printf("thread: ok\n");
	return 0;
}

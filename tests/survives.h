/* survives.h: SURVIVES(what, body) of the hardening tests: runs `body`
 * (1 when its checks hold) in a child process, so a crash is one named
 * failure and the rest still run; a signal or 0 fails `what` (check.h). */
#ifndef REMAT_SURVIVES_H
#define REMAT_SURVIVES_H
#include <sys/wait.h>
#include <unistd.h>

#define SURVIVES(what, body)                                                                            \
    do {                                                                                                \
        fflush(NULL);                                                                                   \
        pid_t pid_ = fork();                                                                            \
        if (pid_ == 0) _exit(((body) ? 0 : 1));                                                         \
        int st_ = 0;                                                                                    \
        waitpid(pid_, &st_, 0);                                                                         \
        CHECK(WIFEXITED(st_) && WEXITSTATUS(st_) == 0, "%s: %s", what,                                  \
              WIFSIGNALED(st_) ? "crashed" : "returned the wrong result");                              \
    } while (0)

#endif

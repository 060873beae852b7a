/* How a ping-pong's client waits for the answer, and what each way costs: five 96-byte
 * TCP ping-pongs against one echo (`remora bench echo`), taking turns in rounds of 100 so
 * that a change of the machine's state falls on all of them alike. Prints each one's p50
 * and p10 in microseconds. Run by scripts/io-wait.sh, which starts the echo and pins both.
 *
 *   blocking-read  read(2) on a blocking socket (the raw ping-pong of `bench soft`)
 *   epoll+read     epoll_wait(2) on a non-blocking socket, then read(2) (the executor's
 *                  wait before the eighteenth session)
 *   poll+read      poll(2), then a non-blocking recv(2)
 *   peek+read      a blocking recv(2) with MSG_PEEK, then a non-blocking recv(2)
 *   blocking-recv  recv(2) on a blocking socket (the executor's blocking receive)
 *
 * Usage: io-wait-pingpong PORT ROUNDS
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MSG 96
#define ROUND 100
#define WAYS 5

static const char *names[WAYS] = {"blocking-read", "epoll+read", "poll+read", "peek+read",
                                  "blocking-recv"};

struct conn {
    int fd, ep, way, n;
    long *lat;
};

static void die(const char *what) {
    perror(what);
    exit(1);
}

/* Reads one answer of MSG bytes the way `c` waits. */
static void answer(struct conn *c, char *b) {
    int got = 0;
    while (got < MSG) {
        ssize_t n;
        switch (c->way) {
        case 0:
            n = read(c->fd, b + got, MSG - got);
            break;
        case 1: {
            struct epoll_event ev;
            if (epoll_wait(c->ep, &ev, 1, -1) < 0)
                die("epoll_wait");
            n = read(c->fd, b + got, MSG - got);
            break;
        }
        case 2: {
            struct pollfd p = {c->fd, POLLIN, 0};
            if (poll(&p, 1, -1) < 0)
                die("poll");
            n = recv(c->fd, b + got, MSG - got, MSG_DONTWAIT);
            break;
        }
        case 3: {
            char x;
            if (recv(c->fd, &x, 1, MSG_PEEK) < 0)
                die("recv");
            n = recv(c->fd, b + got, MSG - got, MSG_DONTWAIT);
            break;
        }
        default:
            n = recv(c->fd, b + got, MSG - got, 0);
        }
        if (n == 0) {
            fprintf(stderr, "the echo closed\n");
            exit(1);
        }
        if (n > 0)
            got += n;
    }
}

static int cmp(const void *x, const void *y) {
    long a = *(const long *)x, b = *(const long *)y;
    return a < b ? -1 : a > b;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s PORT ROUNDS\n", argv[0]);
        return 2;
    }
    int port = atoi(argv[1]), rounds = atoi(argv[2]);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct conn cs[WAYS];
    for (int i = 0; i < WAYS; i++) {
        struct conn *c = &cs[i];
        c->way = i;
        c->n = 0;
        c->lat = malloc(sizeof(long) * (size_t)rounds * ROUND);
        c->fd = socket(AF_INET, SOCK_STREAM, 0);
        if (c->fd < 0 || connect(c->fd, (void *)&a, sizeof a) != 0)
            die("connect");
        int one = 1;
        setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (i == 1) {
            fcntl(c->fd, F_SETFL, O_NONBLOCK);
            c->ep = epoll_create1(0);
            struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.fd = c->fd};
            epoll_ctl(c->ep, EPOLL_CTL_ADD, c->fd, &ev);
        }
    }
    char b[MSG];
    memset(b, 1, MSG);
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < WAYS; i++)
            for (int k = 0; k < ROUND; k++) {
                struct conn *c = &cs[i];
                struct timespec t0, t1;
                clock_gettime(CLOCK_MONOTONIC, &t0);
                if (write(c->fd, b, MSG) != MSG)
                    die("write");
                answer(c, b);
                clock_gettime(CLOCK_MONOTONIC, &t1);
                c->lat[c->n++] = (t1.tv_sec - t0.tv_sec) * 1000000000L + (t1.tv_nsec - t0.tv_nsec);
            }
    printf("| client waits by | p50 µs | p10 µs |\n|---|---|---|\n");
    for (int i = 0; i < WAYS; i++) {
        struct conn *c = &cs[i];
        qsort(c->lat, c->n, sizeof(long), cmp);
        printf("| %s | %.2f | %.2f |\n", names[i], c->lat[c->n / 2] / 1000.0,
               c->lat[c->n / 10] / 1000.0);
    }
    return 0;
}

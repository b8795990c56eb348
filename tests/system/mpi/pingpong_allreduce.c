/* Two or more MPI ranks: a ping-pong of growing messages between ranks 0 and
 * 1 with every byte checked, then an allreduce of every rank's vector. Prints
 * one line per phase on rank 0; exits non-zero on any mismatch. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { kMaxBytes = 1 << 20, kRounds = 100, kVector = 4096 };

static unsigned char pattern(int round, size_t i) {
    return (unsigned char)(i * 31 + round * 7 + 1);
}

static int pingpong(int rank) {
    unsigned char* buf = malloc(kMaxBytes);
    int errors = 0;
    for (size_t bytes = 1; bytes <= kMaxBytes; bytes *= 4) {
        for (int round = 0; round < kRounds; ++round) {
            if (rank == 0) {
                for (size_t i = 0; i < bytes; ++i)
                    buf[i] = pattern(round, i);
                MPI_Send(buf, (int)bytes, MPI_BYTE, 1, round, MPI_COMM_WORLD);
                memset(buf, 0, bytes);
                MPI_Recv(buf, (int)bytes, MPI_BYTE, 1, round, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                for (size_t i = 0; i < bytes; ++i)
                    errors += buf[i] != (unsigned char)~pattern(round, i);
            } else if (rank == 1) {
                MPI_Recv(buf, (int)bytes, MPI_BYTE, 0, round, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                for (size_t i = 0; i < bytes; ++i) {
                    errors += buf[i] != pattern(round, i);
                    buf[i] = (unsigned char)~buf[i];
                }
                MPI_Send(buf, (int)bytes, MPI_BYTE, 0, round, MPI_COMM_WORLD);
            }
        }
        if (rank == 0)
            printf("pingpong %zu bytes x %d: %s\n", bytes, kRounds, errors ? "MISMATCH" : "ok");
    }
    free(buf);
    return errors;
}

static int allreduce(int rank, int size) {
    long* in = malloc(kVector * sizeof(long));
    long* out = malloc(kVector * sizeof(long));
    for (int i = 0; i < kVector; ++i)
        in[i] = (long)(rank + 1) * i;
    MPI_Allreduce(in, out, kVector, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    int errors = 0;
    const long ranks_sum = (long)size * (size + 1) / 2;
    for (int i = 0; i < kVector; ++i)
        errors += out[i] != ranks_sum * i;
    if (rank == 0)
        printf("allreduce %d longs over %d ranks: %s\n", kVector, size, errors ? "MISMATCH" : "ok");
    free(in);
    free(out);
    return errors;
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int errors = size < 2 ? 1 : pingpong(rank) + allreduce(rank, size);
    int total = 0;
    MPI_Reduce(&errors, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("%s\n", total ? "FAILED" : "PASSED");
    MPI_Finalize();
    return total ? 1 : 0;
}

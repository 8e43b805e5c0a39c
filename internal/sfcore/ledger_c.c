// SPDX-License-Identifier: Apache-2.0
/* The ledger file's helpers the schedule file uses (slot locks, mutex). */
#include "ledger_file.c"
#include "ledger_file_open.c"

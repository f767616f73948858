// Public header. Data-parallel training: the store, process groups, DDP and the rank
// environment (docs/distributed.md). The Gloo CPU backend is separate:
// nabla/distributed/gloo/process_group_gloo.h in library nabla::distributed_gloo.
#pragma once

#include "nabla/distributed/ddp.h"
#include "nabla/distributed/env.h"
#include "nabla/distributed/process_group.h"
#include "nabla/distributed/process_group_nccl.h"
#include "nabla/distributed/store.h"
#include "nabla/distributed/tcp_store.h"

// Public header. The data library: datasets, samplers, the DataLoader, the device prefetcher
// and the ImageNet image pipeline (see docs/design/data.md). Included by <nabla/nabla.h>.
#pragma once

#include "nabla/data/buffer_pool.h"
#include "nabla/data/cifar.h"
#include "nabla/data/data_loader.h"
#include "nabla/data/dataset.h"
#include "nabla/data/device_prefetcher.h"
#include "nabla/data/error.h"
#include "nabla/data/idx.h"
#include "nabla/data/image/decode.h"
#include "nabla/data/image/folder_index.h"
#include "nabla/data/image/image_folder.h"
#include "nabla/data/image/pipeline.h"
#include "nabla/data/image/transforms.h"
#include "nabla/data/normalize.h"
#include "nabla/data/sample_random.h"
#include "nabla/data/sampler.h"
#include "nabla/data/synthetic.h"
#include "nabla/data/token_file.h"

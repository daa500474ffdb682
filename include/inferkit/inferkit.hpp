#pragma once
// Umbrella header: everything inferkit offers. Each header also stands alone.

#include "inferkit/version.hpp"

#include "inferkit/core/convert.hpp"
#include "inferkit/core/error.hpp"
#include "inferkit/core/half.hpp"
#include "inferkit/core/online_softmax.hpp"
#include "inferkit/core/philox.hpp"
#include "inferkit/core/simd.hpp"
#include "inferkit/core/threading.hpp"
#include "inferkit/core/view.hpp"

/* SPDX-License-Identifier: GPL-2.0-or-later */
/* MFU's peak (dtrain_metrics.h, dtrain_mfu): a measured peak is the best
 * rate seen so far, so a start-up GEMM timed slow on a noisy machine never
 * makes MFU read over 100%; a declared peak (--peak-flops) stays. */
#include "trainer/dtrain_metrics.h"
#include "tap.h"

#include <math.h>

int main(void)
{
    /* the start-up GEMM measured 10 GFLOP/s (slow: a noisy start), the steps run at 14.3, then 12, then 20 */
    double peak = 10e9, mfu = dtrain_mfu(&peak, 1, 14.3e9), worst = mfu;
    ok(mfu <= 1.0 && peak == 14.3e9, "a step faster than the measured GEMM raises the peak: MFU %.3f, not 1.43",
       mfu);
    mfu = dtrain_mfu(&peak, 1, 12e9);
    worst = fmax(worst, mfu);
    ok(fabs(mfu - 12.0 / 14.3) < 1e-12 && peak == 14.3e9, "a slower step is measured against the best rate: %.3f",
       mfu);
    mfu = dtrain_mfu(&peak, 1, 20e9);
    worst = fmax(worst, mfu);
    ok(mfu == 1.0 && peak == 20e9, "a new best is 100%%, never more");
    ok(worst <= 1.0, "over a noisy start and later steps, MFU never exceeds 1 (largest %.3f)", worst);

    double declared = 10e9;
    mfu = dtrain_mfu(&declared, 0, 14.3e9);
    ok(declared == 10e9 && fabs(mfu - 1.43) < 1e-12, "a declared peak (--peak-flops) stays as given");
    double none = 0.0;
    ok(dtrain_mfu(&none, 1, 5e9) == 0.0 && none == 0.0, "no peak known: MFU 0");
    return tap_done();
}

/* SPDX-License-Identifier: GPL-2.0-or-later */
/* MFU's peak (dtrain_metrics.h, dtrain_mfu): a measured peak is the best
 * rate seen so far, so a start-up GEMM timed slow on a noisy machine never
 * makes MFU read over 100%; a declared peak (--peak-flops) stays, and a
 * step over it is said once (dtrain_mfu_peak_warning). */
#include "trainer/dtrain_metrics.h"
#include "tap.h"

#include <math.h>
#include <string.h>

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

    /* a declared peak under a step's rate is wrong: said once, never for a measured peak */
    char why[320] = "";
    int warned = 0;
    ok(dtrain_mfu_peak_warning(0.9, 0, 10e9, 3, &warned, why, sizeof why) == 0 && !warned,
       "a declared peak above the step's rate: no warning");
    ok(dtrain_mfu_peak_warning(1.43, 0, 10e9, 4, &warned, why, sizeof why) == 1 && warned &&
       strstr(why, "MFU 143.0% at step 4") != NULL && strstr(why, "--peak-flops") != NULL,
       "MFU over 100%% of a declared peak: one line saying the given peak is too low (%s)", why);
    ok(dtrain_mfu_peak_warning(1.5, 0, 10e9, 5, &warned, why, sizeof why) == 0, "and only once");
    int warned_measured = 0;
    ok(dtrain_mfu_peak_warning(1.2, 1, 10e9, 1, &warned_measured, why, sizeof why) == 0 && !warned_measured,
       "a measured peak is raised instead (dtrain_mfu), never warned about");
    return tap_done();
}

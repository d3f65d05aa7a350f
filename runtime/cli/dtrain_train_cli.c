/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-train: train a GPT-2 model in one process; see dtrain_train.h. */
#include "dtrain_train.h"

int main(int argc, char **argv)
{
    return dtrain_train_main(argc, argv);
}

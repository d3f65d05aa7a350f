#!/bin/sh
. "${DTRAIN_TAP_SH:?}"
done_testing

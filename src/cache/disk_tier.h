/* disk_tier.h - the disk tier (disk.h) as one of the store's tiers (tier.h). */
#ifndef STRATA_CACHE_DISK_TIER_H
#define STRATA_CACHE_DISK_TIER_H

#include "cache/disk.h"
#include "cache/tier.h"

/* The tier reads and writes d, which the caller keeps open while the
 * store uses it. */
cache_tier disk_tier(disk_store *d);

#endif

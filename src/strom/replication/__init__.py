"""Followers: the replica fetcher and the ISR change (AlterPartition) sender."""

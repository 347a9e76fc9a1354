"""Helpers shared by more than one op: precision and dtype constants, segment helpers, block/chunk layout,
the Pallas grid wrapper, the api argument checks. An op imports these; no op imports another op's private
names."""

"""`python -m attestation.verify RESULT.jwt --jwks KEYS.json [--node] [--nonce] [--max-age]
[--allow-contraindicated]`: verify a signed attestation result offline (exit 0 genuine and
affirming, 1 not genuine or not as asked, 2 unreadable input, 3 contraindicated).

The checks are those of the tenants' client, gpufleet_client.offline_verification, where they live
once so that a tenant with only the client verifies with the same code; see its docstring.
"""

import sys

from gpufleet_client.offline_verification import main

if __name__ == "__main__":
    sys.exit(main())

from lookahead_sdk.cli import main

raise SystemExit(main())

from tinyloop.cli import main

raise SystemExit(main())

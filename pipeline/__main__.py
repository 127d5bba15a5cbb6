from pipeline.cli.main import main

raise SystemExit(main())

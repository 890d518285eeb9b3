"""The Qt desktop UI. Entry point: `turbospark_app.ui.app.run_app`."""

"""What the chapter's nbgrader course (mic_tools.assignments) changes in nbgrader 0.9.6's autograding.

nbgrader keeps a copied cell's id on the last copy only (its ``DeduplicateIds``), by emptying the ``nbgrader``
metadata of the earlier copies. With ``OverwriteCells.add_missing_cells`` on, which puts back a test cell the
student deleted, those emptied entries then crash autograding (``KeyError: 'grade_id'`` in
``add_missing_task_cells``, which reads the id of every cell that has ``nbgrader`` metadata at all). So a student
who copied a cell would get no grade. :class:`DeduplicateIds` removes the entry instead: the earlier copies become
ordinary cells, as nbgrader intends, and the restored cells and the grades are nbgrader's own. The course's
``nbgrader_config.py`` puts it in place of nbgrader's (tests/test_grading.py copies a cell and deletes another).
"""
from nbgrader import utils
from nbgrader.preprocessors import ClearOutput, CheckCellMetadata, OverwriteCells, OverwriteKernelspec
from nbgrader.preprocessors import DeduplicateIds as NbgraderDeduplicateIds


class DeduplicateIds(NbgraderDeduplicateIds):
    """nbgrader's, except that an earlier copy of a cell loses its ``nbgrader`` metadata whole, not its contents."""

    def preprocess_cell(self, cell, resources, cell_index):
        if not (utils.is_grade(cell) or utils.is_solution(cell) or utils.is_locked(cell)):
            return cell, resources
        grade_id = cell.metadata.nbgrader["grade_id"]
        if grade_id in self.grade_ids:
            self.log.warning("Cell with id '%s' exists multiple times: the last one keeps it.", grade_id)
            del cell.metadata["nbgrader"]
        else:
            self.grade_ids.add(grade_id)
        return cell, resources


# nbgrader's sanitizing steps before autograding, in its order, with the deduplication above.
SANITIZE = [ClearOutput, DeduplicateIds, OverwriteKernelspec, OverwriteCells, CheckCellMetadata]
